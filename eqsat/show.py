"""Pictures: a Program or an e-graph as a graphviz graph, rendered to SVG.

Graphs are built with the ``graphviz`` package and laid out by the ``dot`` command, or, where Graphviz
is not installed, by ``graphviz-pure`` (a self-contained port installed with eqsat).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence, Set
from numbers import Integral
from pathlib import Path
from typing import Any

import graphviz

from eqsat.egraph import Node, Serialized, attrs_of, spec_of
from eqsat.errors import EqsatError
from eqsat.ir import Program
from eqsat.text import format_attr_value

_SHAPES = {"input": "ellipse", "param": "ellipse", "output": "doubleoctagon"}


def _layout_command() -> str:
    """``dot`` if installed, else the ``graphviz-pure`` executable next to this Python."""
    local = Path(sys.executable).with_name("graphviz-pure")
    for cand in (shutil.which("dot"), str(local) if local.exists() else None, shutil.which("graphviz-pure")):
        if cand:
            return cand
    raise EqsatError("no graphviz layout program found: install graphviz or `pip install graphviz-pure`")


def render(graph: graphviz.Digraph, fmt: str) -> bytes:
    """Lay out a graphviz graph and return it in format ``fmt`` (svg, png, pdf, ...: what the layout
    program writes)."""
    command = _layout_command()
    out = subprocess.run([command, f"-T{fmt}"], input=graph.source.encode(), capture_output=True)
    if out.returncode != 0:
        why = out.stderr.decode(errors="replace").strip()
        raise EqsatError(f"{Path(command).name} cannot write {fmt}: {why} (svg and png always work)")
    return out.stdout


def render_svg(graph: graphviz.Digraph) -> str:
    """Lay out a graphviz graph and return its SVG text."""
    return render(graph, "svg").decode()


VIEWS = ("program", "original", "egraph")  # what ``OptimizeResult.show`` draws


class ViewError(EqsatError, ValueError):
    """A view or an option of a picture that does not exist (a ``ValueError``, and an ``EqsatError``
    so the CLI reports it as one)."""


class Picture:
    """A rendered graph (``program_graph``, ``egraph_graph``; what ``OptimizeResult.show`` returns):
    shown inline in notebooks (as SVG), written to a file by ``save``.

    ``graph`` is the ``graphviz.Digraph`` (its ``source`` the dot text), ``svg`` its SVG text.
    """

    def __init__(self, graph: graphviz.Digraph) -> None:
        self.graph = graph
        self.svg = render_svg(graph)

    def _repr_svg_(self) -> str:
        return self.svg

    def __repr__(self) -> str:  # no address: a notebook stores the same text on every run
        title = self.graph.graph_attr.get("label", "")
        return f"<Picture {title!r}>" if title else "<Picture>"

    def save(self, path: str | Path) -> Path:
        """Write the picture in the format the suffix of ``path`` names, and return the path.

        - ``.svg`` (or no suffix): the SVG text shown in notebooks;
        - ``.png``, ``.jpg`` / ``.jpeg``: a bitmap, laid out again in that format;
        - ``.dot`` / ``.gv``: the graph's Graphviz source, to lay out or edit with Graphviz's tools;
        - ``.json``, ``.plain``, ``.xdot``: Graphviz's layout as data;
        - ``.pdf``, ``.gif`` and the rest of what Graphviz writes, where its ``dot`` is installed
          (``graphviz-pure``, used where it is not, writes none of these).

        A format the layout program cannot write is an ``EqsatError`` naming it (and the formats it
        can write); the file is not created then.

        :param path: where to write; its suffix chooses the format (case does not matter).
        :returns: ``path``, as a ``Path``.
        """
        path = Path(path)
        fmt = path.suffix.lower().lstrip(".") or "svg"
        if fmt == "svg":
            path.write_text(self.svg)
        elif fmt in ("dot", "gv"):
            path.write_text(self.graph.source)
        else:
            path.write_bytes(render(self.graph, fmt))
        return path


# Helvetica's widest common glyphs (digits, lowercase) are about 0.56 em; 0.62 em a character leaves
# room for the layout engine's own estimate, which is narrower than the renderer's (graphviz-pure's).
_EM_PER_CHAR = 0.62
_PAD_INCHES = 0.3


def _fit(label: str, fontsize: float) -> str:
    """The minimum node width (inches) that holds every line of ``label`` at ``fontsize``."""
    longest = max(len(line) for line in label.split("\\n"))
    return f"{longest * fontsize * _EM_PER_CHAR / 72 + _PAD_INCHES:.2f}"


def _value(value: object) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(map(str, value)) + ")"
    return format_attr_value(value)  # type: ignore[arg-type]


def _label(name: str, attrs: dict) -> str:
    shown = {k: v for k, v in attrs.items() if k != "dtype" or name == "cast"}
    details = "\\n".join(f"{k}={_value(v)}" for k, v in shown.items())
    return f"{name}\\n{details}" if details else name


def program_graph(program: Program, title: str = "") -> graphviz.Digraph:
    """Ops as boxes (attributes under the name, each box as wide as its longest line), values as edges
    labelled with their types."""
    g = graphviz.Digraph(
        graph_attr={"rankdir": "TB", "label": title, "fontsize": "12"},
        node_attr={"shape": "box", "fontsize": "10", "fontname": "Helvetica"},
        edge_attr={"fontsize": "8", "fontname": "Helvetica"},
    )
    producer: dict[int, str] = {}
    for kind, values in (("input", program.inputs), ("param", program.params)):
        for i, v in enumerate(values):
            nid = f"{kind}{i}"
            label = f"{kind} {v.name}"
            g.node(nid, label, shape=_SHAPES[kind], width=_fit(label, 10))
            producer[id(v)] = nid
    for i, op in enumerate(program.live_ops()):
        nid = f"op{i}"
        name = str(op.attrs.get("op", op.name)) if op.name == "opaque" else op.name
        label = _label(name, {k: v for k, v in op.attrs.items() if k != "op"})
        g.node(nid, label, style="dashed" if op.name == "opaque" else "solid", width=_fit(label, 10))
        for v in op.inputs:
            g.edge(producer[id(v)], nid, label=str(v.type))
        for out in op.outputs:
            producer[id(out)] = nid
    for i, (v, name) in enumerate(zip(program.outputs, program.output_names, strict=True)):
        g.node(f"out{i}", name, shape=_SHAPES["output"], width=_fit(name, 10))
        g.edge(producer[id(v)], f"out{i}", label=str(v.type))
    return g


MAX_CLASSES = 150  # more than this many e-classes in one picture is unreadable
MAX_NODES = 3  # e-nodes drawn in one e-class by default: more side by side make the picture too wide
DEFAULT_DEPTH = 3  # reads drawn from the outputs by ``OptimizeResult.show`` when around= is not given


def _reads(graph: Serialized, node: Node) -> list[str]:
    """The tensor classes an e-node reads (the elements of a list operand, in order)."""
    out = []
    for c in node.children:
        if c in graph.values or c not in graph.classes:
            continue
        first = graph.classes[c][0]
        out.extend(
            graph.list_classes(c, lambda k: graph.classes[k][0]) if first.op in ("TNil", "TCons") else [c]
        )
    return out


def _node_label(graph: Serialized, node: Node) -> str:
    """The constructor and its attributes by name (``scale=1.0``), as a program's op shows them."""
    spec = spec_of(node)
    if spec is None:  # Input, Opaque: their values as they are
        values = [_value(graph.value(c)) for c in node.children if c in graph.values]
        return "\\n".join([node.op, *values]) if values else node.op
    return _label(node.op, attrs_of(graph, node, spec))


def _tensor_classes(graph: Serialized) -> dict[str, list[Node]]:
    return {c: ns for c, ns in graph.classes.items() if ns[0].op not in ("TNil", "TCons")}


def classes_with(graph: Serialized, op: str) -> list[str]:
    """The e-classes holding an e-node of constructor ``op`` (e.g. ``"Attention"``): places to look
    ``around``."""
    return [cid for cid, nodes in _tensor_classes(graph).items() if any(n.op == op for n in nodes)]


def egraph_view(
    graph: Serialized,
    around: Iterable[str] | None = None,
    depth: int | None = None,
    max_classes: int = MAX_CLASSES,
) -> tuple[list[str], int]:
    """The e-classes a picture shows: those within ``depth`` reads of ``around`` (e-class ids, or one;
    default: the classes nothing reads, i.e. the outputs), breadth first, at most ``max_classes``; and
    how many there are within the depth in all. An e-class not in ``graph`` is an ``EqsatError``; a
    negative ``depth`` or a ``max_classes`` under 1 a ``ViewError`` (a ``ValueError``)."""
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, Integral) or depth < 0):
        raise ViewError(f"depth={depth!r}: a number of reads, 0 or more (None: no limit)")
    if isinstance(max_classes, bool) or not isinstance(max_classes, Integral) or max_classes < 1:
        raise ViewError(f"max_classes={max_classes!r}: the most e-classes drawn, 1 or more")
    classes = _tensor_classes(graph)
    if isinstance(around, str):  # one e-class id, not its characters
        around = [around]
    if around is None:
        read = {c for ns in classes.values() for n in ns for c in _reads(graph, n)}
        around = [c for c in classes if c not in read]
    start = list(dict.fromkeys(around))
    unknown = [c for c in start if c not in classes]
    if unknown:
        raise EqsatError(f"no e-class {unknown[0]!r} in this e-graph")
    level, seen, frontier = 0, dict.fromkeys(start), start
    while frontier and (depth is None or level < depth):
        nxt = [c for k in frontier for n in classes[k] for c in _reads(graph, n) if c not in seen]
        seen.update(dict.fromkeys(nxt))
        frontier, level = list(dict.fromkeys(nxt)), level + 1
    return list(seen)[:max_classes], len(seen)


def _drawn(nodes: list[Node], max_nodes: int | None) -> list[Node]:
    """The e-nodes of a class a picture draws: one of each constructor first, then the rest, at most
    ``max_nodes`` (None: all)."""
    if max_nodes is None or len(nodes) <= max_nodes:
        return nodes
    firsts = list({n.op: n for n in reversed(nodes)}.values())[::-1]
    return (firsts + [n for n in nodes if n not in firsts])[:max_nodes]


def egraph_graph(
    graph: Serialized,
    around: Iterable[str] | None = None,
    depth: int | None = None,
    max_classes: int = MAX_CLASSES,
    max_nodes: int | None = None,
) -> graphviz.Digraph:
    """An e-graph drawn as egg and egglog draw them: each e-class a cluster holding its e-nodes (with
    their attributes), an edge from each e-node to each e-class it reads, ending at the cluster.

    ``around`` (e-class ids; default the outputs) and ``depth`` choose a view (see ``egraph_view``);
    past ``max_classes`` the picture stops and its title says how many classes it leaves out. Classes
    not drawn that a drawn node reads appear as dotted ``…`` stubs. ``max_nodes`` caps the e-nodes drawn
    in one class (one of each constructor first); a dotted ``+N e-nodes`` box counts the rest."""
    if max_nodes is not None and (
        isinstance(max_nodes, bool) or not isinstance(max_nodes, Integral) or max_nodes < 1
    ):
        raise ViewError(
            f"max_nodes={max_nodes!r}: the most e-nodes drawn in one e-class, 1 or more (None: all)"
        )
    shown, total = egraph_view(graph, around, depth, max_classes)
    title = f"{len(shown)} e-classes"
    if total > len(shown):
        title = (
            f"showing {len(shown)} of {total} e-classes (max_classes={max_classes}); "
            "pass around= and depth= to see another part"
        )
    whole = len(egraph_view(graph, around, None, 1 << 62)[0])
    classes = _tensor_classes(graph)
    if whole > total or any(len(_drawn(classes[c], max_nodes)) < len(classes[c]) for c in shown):
        title += f" (depth={depth}, max_nodes={max_nodes}): depth=None, max_nodes=None draw all of it"
    g = graphviz.Digraph(
        graph_attr={"compound": "true", "fontsize": "10", "label": title, "labelloc": "t", "newrank": "true"},
        node_attr={"shape": "box", "fontsize": "9", "fontname": "Helvetica"},
        edge_attr={"arrowsize": "0.6"},
    )
    index = {cid: i for i, cid in enumerate(shown)}
    ids: dict[str, str] = {}
    for cid in shown:
        with g.subgraph(name=f"cluster_{index[cid]}") as c:
            c.attr(style="rounded,dashed", label=f"{cid}: {graph.types.get(cid, '')}", fontsize="8")
            for n in _drawn(classes[cid], max_nodes):
                ids[n.id] = nid = f"n{len(ids)}"
                label = _node_label(graph, n)
                c.node(nid, label, width=_fit(label, 9))
            left = len(classes[cid]) - len(_drawn(classes[cid], max_nodes))
            if left:
                c.node(
                    f"rest{index[cid]}",
                    f"+{left} e-nodes",
                    style="dotted",
                    tooltip=f"{left} more e-nodes of {cid}: max_nodes=None draws them",
                )
    stubs: dict[str, str] = {}
    for cid in shown:
        for n in _drawn(classes[cid], max_nodes):
            for child in dict.fromkeys(_reads(graph, n)):
                if child in index:
                    into = {"lhead": f"cluster_{index[child]}"} if child != cid else {}
                    g.edge(ids[n.id], ids[_drawn(classes[child], max_nodes)[0].id], **into)
                else:
                    if child not in stubs:
                        stubs[child] = f"more{len(stubs)}"
                        g.node(stubs[child], "…", style="dotted", tooltip=f"e-class {child}, not drawn")
                    g.edge(ids[n.id], stubs[child], style="dotted")
    return g


def _origins(graph: Serialized, shown: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """What can be known of where the e-classes and e-nodes of ``shown`` came from. egglog records no
    rule per e-node; what it keeps is the ``let`` names eqsat bound when it loaded the program (and the
    proposals of rules with one): a class with none was made by rewriting, so were all its e-nodes; a
    let-bound class with one e-node holds the loaded one; in one with more, which was loaded is not
    known."""
    lets: dict[str, list[str]] = {}
    for name, cid in graph.roots.items():
        lets.setdefault(cid, []).append(name)
    classes = _tensor_classes(graph)
    of_class, of_node = {}, {}
    for cid in shown:
        nodes = classes[cid]
        if cid not in lets:
            of_class[cid] = "made by rewriting"
            of_node.update({n.id: "added by rewriting" for n in nodes})
        elif len(nodes) == 1:
            of_class[cid] = "loaded"
            of_node[nodes[0].id] = "loaded"
        else:
            of_class[cid] = f"loaded; one of its {len(nodes)} e-nodes was loaded, the rest added by rewriting"
    return of_class, of_node


def _node_key(graph: Serialized, node: Node, final_class: dict[str, str]) -> tuple[Any, ...] | None:
    """An e-node by what it is, whatever its e-graph: its op, its attributes' values and the classes
    of the final e-graph its operands are in (None while an operand's is not known)."""
    parts: list[Any] = [node.op]
    for c in node.children:
        if c in graph.values:
            parts.append(("=", graph.value(c)))
        elif c in final_class:
            parts.append(final_class[c])
        else:
            return None
    return tuple(parts)


def _present(state: Serialized, final_index: dict[tuple[Any, ...], str]) -> set[tuple[Any, ...]]:
    """The keys of ``state``'s e-nodes that the final e-graph holds (``final_index``: key -> class).
    e-nodes are never removed, only their classes merged: each class of ``state`` is in one final class,
    found through any of its e-nodes once its operands' are known."""
    final_class: dict[str, str] = {}
    present: set[tuple[Any, ...]] = set()
    pending = [n for nodes in state.classes.values() for n in nodes]
    while pending:
        waiting = []
        for node in pending:
            key = _node_key(state, node, final_class)
            if key is None:
                waiting.append(node)
            elif key in final_index:
                present.add(key)
                final_class.setdefault(node.eclass, final_index[key])
        if len(waiting) == len(pending):
            break  # what is left reads classes the final e-graph dropped (untyped)
        pending = waiting
    return present


def made_by(
    final: Serialized,
    states: Iterable[Serialized],
    fired: Sequence[Iterable[str]],
    writes: Mapping[str, Set[str]],
) -> dict[str, str]:
    """Where each e-node of ``final`` came from: ``loaded``, or ``iteration i: rule`` (or ``one of``
    several). egglog records no rule per e-node, so this compares ``states``, the e-graph as it was
    when loaded and after each iteration, and names the rules that fired in the iteration that added
    the e-node (``fired[i]``) and can write its op (``writes[rule]``: constructor names)."""
    identity = {cid: cid for cid in final.classes}
    final_index: dict[tuple[Any, ...], str] = {}
    node_of_key: dict[tuple[Any, ...], Node] = {}
    for nodes in final.classes.values():
        for n in nodes:
            key = _node_key(final, n, identity)
            if key is not None:  # else it reads a class the serialization left out: no origin
                final_index[key], node_of_key[key] = n.eclass, n
    origin: dict[str, str] = {}
    for index, state in enumerate(states):
        new = [node_of_key[k] for k in _present(state, final_index) if node_of_key[k].id not in origin]
        if index == 0:
            origin.update({n.id: "loaded" for n in new})
            continue
        rules = list(fired[index - 1])
        for n in new:
            by = [r for r in rules if n.op in writes.get(r, ())]
            names = by[0] if len(by) == 1 else f"one of {', '.join(by)}" if by else "a rule"
            origin[n.id] = f"iteration {index}: {names}"
    return origin


def egraph_json(
    graph: Serialized,
    around: Iterable[str] | None = None,
    depth: int | None = None,
    origin: Mapping[str, str] | None = None,
) -> str:
    """The view ``egraph_view`` chooses (tensor classes only, no analysis tables) in egglog's serialized
    e-graph format, for egglog's visualizer: each e-node labelled with its attributes (not drawn as
    primitive children), ``+`` before an e-node added by rewriting, and where ``origin`` (``made_by``)
    is given, the iteration and rule that added it; each class's type, ``let`` names and origin (see
    ``_origins``) shown on it."""
    shown, _ = egraph_view(graph, around, depth, 1 << 62)
    drawn = set(shown)
    classes = _tensor_classes(graph)
    of_class, of_node = _origins(graph, shown)
    if origin is not None:
        of_node = {n: "added by rewriting" for n, made in origin.items() if made != "loaded"}
    lets: dict[str, list[str]] = {}
    for name, cid in graph.roots.items():
        lets.setdefault(cid, []).append(name)
    nodes: dict[str, dict] = {}
    class_data: dict[str, dict] = {}
    stubs: dict[str, str] = {}
    for cid in shown:
        data = {"type": str(graph.types.get(cid, "Tensor")), "origin": of_class[cid]}
        if cid in lets:
            data["let"] = ", ".join(lets[cid])
        class_data[cid] = data
        for n in classes[cid]:
            children = []
            for child in _reads(graph, n):
                if child not in drawn:
                    stub = stubs.setdefault(child, f"more-{child}")
                    nodes.setdefault(stub, {"op": "…", "children": [], "eclass": f"{child} (not shown)"})
                    children.append(stub)
                else:
                    children.append(classes[child][0].id)
            label = _node_label(graph, n).replace("\\n", " ")
            if of_node.get(n.id) == "added by rewriting":
                label = f"+ {label}" + (f" ({origin[n.id]})" if origin else "")
            nodes[n.id] = {"op": label, "children": children, "eclass": cid, "cost": 1.0}
    return json.dumps({"nodes": nodes, "class_data": class_data})


def explore(
    graph: Serialized,
    around: Iterable[str] | None = None,
    depth: int | None = None,
    origin: Mapping[str, str] | None = None,
) -> Any:
    """egglog's interactive e-graph viewer (``egglog.visualizer_widget.VisualizerWidget``, an
    anywidget) over ``egraph_json``'s view: pan, zoom, select an e-class or e-node and *Filter* to what
    it reads; with ``origin``, each e-node rewriting added names the iteration and rule. Shown where it
    is the value of a notebook cell; ``display_or_open()`` opens it in a browser outside one. Without
    anywidget or IPython an ``EqsatError`` says what to install."""
    payload = egraph_json(graph, around, depth, origin)
    try:
        from egglog.visualizer_widget import VisualizerWidget
    except ImportError as e:
        raise EqsatError(
            f"the interactive e-graph view needs anywidget and IPython ({e}): pip install anywidget ipython"
        ) from e
    return VisualizerWidget(egraphs=[payload])
