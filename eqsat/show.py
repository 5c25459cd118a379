"""Pictures: a Program or an e-graph as a graphviz graph, rendered to SVG.

Graphs are built with the ``graphviz`` package and laid out by the ``dot`` command, or, where Graphviz
is not installed, by ``graphviz-pure`` (a self-contained port installed with eqsat).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import graphviz

from eqsat.egraph import Serialized
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


def render_svg(graph: graphviz.Digraph) -> str:
    """Lay out a graphviz graph and return its SVG text."""
    out = subprocess.run([_layout_command(), "-Tsvg"], input=graph.source, capture_output=True, text=True)
    if out.returncode != 0:
        raise EqsatError(f"graphviz failed: {out.stderr.strip()}")
    return out.stdout


class Picture:
    """A rendered graph: shows itself in notebooks, ``save(path)`` writes the SVG."""

    def __init__(self, graph: graphviz.Digraph) -> None:
        self.graph = graph
        self.svg = render_svg(graph)

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.svg)
        return path


def _label(name: str, attrs: dict) -> str:
    shown = {k: v for k, v in attrs.items() if k != "dtype" or name == "cast"}
    details = "\\n".join(f"{k}={format_attr_value(v)}" for k, v in shown.items())
    return f"{name}\\n{details}" if details else name


def program_graph(program: Program, title: str = "") -> graphviz.Digraph:
    """Ops as boxes, values as edges labelled with their types."""
    g = graphviz.Digraph(
        graph_attr={"rankdir": "TB", "label": title, "fontsize": "12"},
        node_attr={"shape": "box", "fontsize": "10", "fontname": "Helvetica"},
        edge_attr={"fontsize": "8", "fontname": "Helvetica"},
    )
    producer: dict[int, str] = {}
    for kind, values in (("input", program.inputs), ("param", program.params)):
        for i, v in enumerate(values):
            nid = f"{kind}{i}"
            g.node(nid, f"{kind} {v.name}", shape=_SHAPES[kind])
            producer[id(v)] = nid
    for i, op in enumerate(program.live_ops()):
        nid = f"op{i}"
        name = str(op.attrs.get("op", op.name)) if op.name == "opaque" else op.name
        attrs = {k: v for k, v in op.attrs.items() if k != "op"}
        g.node(nid, _label(name, attrs), style="dashed" if op.name == "opaque" else "solid")
        for v in op.inputs:
            g.edge(producer[id(v)], nid, label=str(v.type))
        for out in op.outputs:
            producer[id(out)] = nid
    for i, (v, name) in enumerate(zip(program.outputs, program.output_names, strict=True)):
        g.node(f"out{i}", name, shape=_SHAPES["output"])
        g.edge(producer[id(v)], f"out{i}", label=str(v.type))
    return g


def egraph_graph(graph: Serialized, max_classes: int = 400) -> graphviz.Digraph:
    """E-classes as clusters of their e-nodes; an edge from each node to the classes it reads."""
    g = graphviz.Digraph(
        graph_attr={"compound": "true", "fontsize": "10"},
        node_attr={"shape": "box", "fontsize": "9", "fontname": "Helvetica"},
    )
    classes = list(graph.classes.items())[:max_classes]
    anchor = {cid: f"{cid}:{nodes[0].id}" for cid, nodes in classes}
    for cid, nodes in classes:
        with g.subgraph(name=f"cluster_{cid}") as c:
            c.attr(style="rounded,dashed", label=str(graph.types.get(cid, "")), fontsize="8")
            for n in nodes:
                c.node(f"{cid}:{n.id}", n.op)
    for cid, nodes in classes:
        for n in nodes:
            for child in n.children:
                if child in anchor:
                    g.edge(f"{cid}:{n.id}", anchor[child], lhead=f"cluster_{child}")
    return g
