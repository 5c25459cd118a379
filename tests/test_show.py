"""Pictures, checked on the rendered SVG: e-classes as clusters holding their e-nodes, edges that end
at the cluster of the class they read, layered (not one row), views around a class with a depth,
the cap with its message, and program boxes as wide as their labels."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import eqsat
from eqsat.show import VIEWS, Picture, ViewError, classes_with, egraph_graph, egraph_view, program_graph

SVG = "{http://www.w3.org/2000/svg}"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _attention(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / 8.0
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


@pytest.fixture(scope="module")
def result() -> eqsat.OptimizeResult:
    x = jnp.ones((1, 16, 2, 8))
    return eqsat.optimize(eqsat.from_jax(_attention, x, x, x))


def _points(text: str) -> list[tuple[float, float]]:
    nums = [float(n) for n in NUMBER.findall(text)]
    return list(zip(nums[::2], nums[1::2], strict=True))


def _box(points: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return min(xs), min(ys), max(xs), max(ys)


def _parts(svg: str) -> tuple[dict, dict, dict]:
    """Cluster boxes, node boxes (with their text lines) and edge end points, by graphviz name."""
    clusters, nodes, edges = {}, {}, {}
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        title = g.find(f"{SVG}title")
        shape = next(e for e in g.iter() if e.tag in (f"{SVG}polygon", f"{SVG}path", f"{SVG}ellipse"))
        if g.get("class") == "cluster":
            clusters[title.text] = _box(_points(shape.get("d") or shape.get("points")))
        elif g.get("class") == "node":
            texts = [(t.text or "", float(t.get("font-size"))) for t in g.iter(f"{SVG}text")]
            if shape.tag == f"{SVG}ellipse":
                cx, cy, rx, ry = (float(shape.get(k)) for k in ("cx", "cy", "rx", "ry"))
                nodes[title.text] = ((cx - rx, cy - ry, cx + rx, cy + ry), texts)
            else:
                nodes[title.text] = (_box(_points(shape.get("points") or shape.get("d"))), texts)
        elif g.get("class") == "edge":
            edges[title.text] = _points(g.find(f".//{SVG}path").get("d"))[-1]
    return clusters, nodes, edges


def _membership(source: str) -> dict[str, str]:
    """node -> cluster, from the dot source."""
    out = {}
    for name, body in re.findall(r"subgraph (cluster_\d+) \{(.*?)\n\t\}", source, re.S):
        for node in re.findall(r"^\t\t(n\d+) \[", body, re.M):
            out[node] = name
    return out


def _distance_to_border(p: tuple[float, float], box: tuple[float, float, float, float]) -> float:
    x, y = p
    x0, y0, x1, y1 = box
    dx, dy = max(x0 - x, 0, x - x1), max(y0 - y, 0, y - y1)
    if dx or dy:
        return (dx * dx + dy * dy) ** 0.5
    return min(x - x0, x1 - x, y - y0, y1 - y)


def test_eclasses_are_clusters_of_their_nodes_and_edges_end_at_the_class(result):
    picture = result.show("egraph", depth=None, max_nodes=None)
    clusters, nodes, edges = _parts(picture.svg)
    members = _membership(picture.graph.source)
    assert len(clusters) == len(egraph_view(result.egraph)[0]) == len(result.egraph.classes) - _lists(result)
    assert set(members) == {n for n in nodes if n.startswith("n")}
    for node, cluster in members.items():
        (x0, y0, x1, y1), _ = nodes[node]
        cx0, cy0, cx1, cy1 = clusters[cluster]
        assert cx0 <= x0 and x1 <= cx1 and cy0 <= y0 and y1 <= cy1, f"{node} outside {cluster}"
    into = re.findall(r"(n\d+) -> (n\d+) \[lhead=(cluster_\d+)", picture.graph.source)
    assert into, "no edge into a class"
    for tail, head, cluster in into:
        end = edges[f"{tail}->{head}"]
        assert _distance_to_border(end, clusters[cluster]) < 12, f"{tail}->{head} stops away from {cluster}"
    rows = {round(box[1]) for box in clusters.values()}
    assert len(rows) > 3, "clusters laid out in one row"


def _lists(result) -> int:
    return sum(ns[0].op in ("TNil", "TCons") for ns in result.egraph.classes.values())


def test_a_view_around_an_output_is_depth_limited_and_stubs_what_it_leaves_out(result):
    out = result.outputs[0]
    shown, _ = egraph_view(result.egraph, [out], depth=2)
    assert shown[0] == out and 1 < len(shown) < len(egraph_view(result.egraph, [out])[0])
    picture = result.show("egraph", around=0, depth=2)
    clusters, nodes, _ = _parts(picture.svg)
    assert len(clusters) == len(shown)
    assert any(texts == [("…", 9.0)] for _, texts in nodes.values())  # classes beyond the depth
    with pytest.raises(eqsat.EqsatError, match="no e-class"):
        egraph_graph(result.egraph, ["Tensor-nope"])


def test_large_egraphs_are_capped_with_a_message(result):
    picture = result.show("egraph", depth=None, max_classes=5)
    clusters, _, _ = _parts(picture.svg)
    assert len(clusters) == 5
    total = len(egraph_view(result.egraph)[0])
    assert f"showing 5 of {total} e-classes" in html.unescape(picture.svg)


def test_program_labels_fit_their_boxes():
    b = eqsat.Builder()
    x = b.input("a_rather_long_input_name", (2, 3, 4, 5, 6))
    y = b.transpose(b.reshape(x, shape=(6, 4, 5, 2, 3)), perm=(4, 3, 2, 1, 0))
    picture = Picture(program_graph(b.build(b.cast(y, dtype="bfloat16"))))
    _, nodes, _ = _parts(picture.svg)
    assert len(nodes) == 5
    for name, ((x0, _, x1, _), texts) in nodes.items():
        # Helvetica: digits and lowercase letters are about 0.56 em wide.
        widest = max(len(t) * size * 0.56 for t, size in texts)
        assert x1 - x0 >= widest, f"{name}: {texts} does not fit {x1 - x0:.0f} px"


def test_a_picture_is_saved_in_the_format_its_suffix_names(result, tmp_path):
    picture = result.show("program")
    assert picture.save(tmp_path / "p.svg").read_text().lstrip().startswith("<")
    assert picture.save(tmp_path / "p.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert picture.save(tmp_path / "p.dot").read_text() == picture.graph.source
    try:
        pdf = picture.save(tmp_path / "p.pdf").read_bytes()
    except eqsat.EqsatError as e:  # graphviz-pure writes no PDF: the error says so and what does work
        assert "pdf" in str(e) and "png" in str(e)
    else:
        assert pdf.startswith(b"%PDF")
    assert picture.save(tmp_path / "p.JPG").read_bytes().startswith(b"\xff\xd8\xff")
    assert picture.save(tmp_path / "p").read_text() == picture.svg  # no suffix: svg
    with pytest.raises(eqsat.EqsatError, match="cannot write nonsense"):
        picture.save(tmp_path / "p.nonsense")
    assert not (tmp_path / "p.nonsense").exists()


def test_a_picture_reads_the_same_on_every_run(result):
    """Its text (what a notebook stores beside the SVG) is its title, not an address."""
    assert repr(result.show("program")) == "<Picture 'program'>"
    assert repr(Picture(program_graph(result.program))) == "<Picture>"


def test_views_and_options_that_do_not_exist_are_clear_errors(result):
    with pytest.raises(ValueError, match=r"no view 'nonsense'.*program, original, egraph"):
        result.show("nonsense")
    with pytest.raises(ValueError, match="no option maxclasses="):
        result.show("egraph", maxclasses=5)
    with pytest.raises(ValueError, match="depth= chooses a view of the e-graph"):
        result.show("program", depth=2)
    with pytest.raises(ValueError, match="around=7: outputs are 0 to 0"):
        result.show("egraph", around=7)
    assert VIEWS == ("program", "original", "egraph")
    assert issubclass(ViewError, ValueError) and issubclass(ViewError, eqsat.EqsatError)  # the CLI's
    with pytest.raises(ValueError, match="depth=-1"):
        egraph_view(result.egraph, depth=-1)
    with pytest.raises(ValueError, match="max_classes=0"):
        egraph_graph(result.egraph, max_classes=0)
    with pytest.raises(eqsat.EqsatError, match="no e-class 'nope'"):
        egraph_view(result.egraph, "nope")
    # one e-class id names that class, not its characters
    (attention,) = classes_with(result.egraph, "Attention")[:1]
    assert egraph_view(result.egraph, attention, depth=0)[0] == [attention]


def test_egraph_nodes_name_their_attributes(result):
    source = egraph_graph(result.egraph).source
    (label,) = {line for line in source.splitlines() if 'label="Attention' in line}.pop().split('label="')[1:]
    assert "\\nscale=" in label and "\\ncausal=" in label


def test_the_egraph_of_a_program_no_rule_changed_can_be_drawn():
    """A saturation that changed nothing is not extracted, but its e-graph is kept for pictures."""
    unchanged = eqsat.optimize(eqsat.from_jax(jnp.tanh, jnp.ones(3)), cache=False)
    assert not unchanged.report.rules_fired
    assert 'class="cluster"' in unchanged.show("egraph").svg


@pytest.fixture(scope="module")
def attention_59() -> eqsat.OptimizeResult:
    from eqsat.examples import __file__ as examples

    path = Path(examples).parent / "multihead_attention_before.pir"
    return eqsat.optimize(eqsat.load(path), cache=False)


def test_the_default_egraph_picture_is_readable_at_its_size(attention_59):
    """The whole e-graph of the 59-op attention example is over 5000 px wide; the default view (the
    outputs to a depth, a few e-nodes a class) fits 2000 px and says how to see all of it."""
    picture = attention_59.show("egraph")
    root = ET.fromstring(picture.svg)
    width, height = (float(root.get(k).removesuffix("pt")) * 4 / 3 for k in ("width", "height"))
    assert width <= 2000 and height <= 2000, (width, height)
    assert "depth=None, max_nodes=None draw all of it" in html.unescape(picture.svg)
    assert "e-nodes" in picture.graph.source  # the +N box of a class drawn in part
    whole = attention_59.show("egraph", depth=None, max_nodes=None)
    assert len(_parts(whole.svg)[0]) == len(egraph_view(attention_59.egraph)[0])
    with pytest.raises(ValueError, match="max_nodes=0"):
        attention_59.show("egraph", max_nodes=0)


def test_the_interactive_view_is_egglogs_viewer_over_the_view(attention_59):
    pytest.importorskip("anywidget")
    from egglog.visualizer_widget import VisualizerWidget

    from eqsat.show import DEFAULT_DEPTH, egraph_json

    widget = attention_59.show("egraph", interactive=True)
    assert isinstance(widget, VisualizerWidget)
    (payload,) = widget.egraphs
    data = json.loads(payload)
    shown, _ = egraph_view(attention_59.egraph, depth=DEFAULT_DEPTH)
    assert set(data["class_data"]) == set(shown)
    nodes = data["nodes"]
    for nid, node in nodes.items():
        assert all(child in nodes for child in node["children"]), nid
        assert not node["op"].startswith(("shape", "dtype", "primitive"))
    kept = {n.id for c in shown for n in attention_59.egraph.classes[c]}
    assert kept <= set(nodes)
    origins = {d["origin"] for d in data["class_data"].values()}
    assert "made by rewriting" in origins and "loaded" in origins
    added = [
        n
        for n in nodes.values()
        if data["class_data"].get(n["eclass"], {}).get("origin") == "made by rewriting"
    ]
    assert added and all(n["op"].startswith("+ ") for n in added)
    assert all(" (iteration " in n["op"] for n in added)  # the rule that added it (``made_by``)
    around = json.loads(egraph_json(attention_59.egraph, [attention_59.outputs[0]], depth=1))
    assert set(around["class_data"]) == set(egraph_view(attention_59.egraph, attention_59.outputs[0], 1)[0])
    with pytest.raises(ValueError, match="interactive= chooses a view of the e-graph"):
        attention_59.show("program", interactive=True)


def test_made_by_names_the_iteration_and_rule_that_added_each_enode(attention_59):
    """Every e-node has an origin; the loaded ones are the program's; the ones added in an iteration are
    never more than the e-graph held after it, and each names a rule that fired then and writes its op."""
    origin = attention_59.made_by()
    graph = attention_59.egraph
    nodes = {n.id: n for ns in graph.classes.values() for n in ns}
    assert set(origin) == set(nodes)  # every e-node has one here
    loaded = [i for i, o in origin.items() if o == "loaded"]
    assert len(loaded) == len({cid for cid in graph.roots.values()} & graph.classes.keys())
    iterations = attention_59.report.saturation.iterations
    rules = {r.name: r for r in attention_59.options.rules}
    born = {}
    for nid, made in origin.items():
        if made == "loaded":
            continue
        when, by = made.split(": ", 1)
        index = int(when.removeprefix("iteration "))
        born[nid] = index
        for name in by.removeprefix("one of ").split(", "):
            assert name in iterations[index - 1].by_rule(), made
            assert nodes[nid].op in rules[name].constructs(), made
    for it in iterations:
        assert sum(1 for i in born.values() if i <= it.index + 1) + len(loaded) <= it.nodes
    fused = [origin[n.id] for n in nodes.values() if n.op == "Attention"]
    assert fused and all("attention-fuse" in made for made in fused)


def test_made_by_with_one_rule_names_it():
    """With one rule, every e-node rewriting added is that rule's, in the iteration that added it."""
    b = eqsat.Builder()
    x = b.input("x", (2, 3, 4))
    y = b.transpose(b.transpose(x, perm=(1, 0, 2)), perm=(0, 2, 1))
    result = eqsat.optimize(b.build(y), rules=["transpose-compose"], cache=False)
    origin = result.made_by()
    assert set(origin.values()) == {"loaded", "iteration 1: transpose-compose"}
    assert result.made_by() == origin
