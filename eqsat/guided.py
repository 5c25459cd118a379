"""Extraction that follows a program: the e-graph's terms that compute what ``template`` computes.

An optimized program chosen at one size of a dynamic dim is found again in the e-graph of the program
at another size: bottom up, each of the template's ops is matched to the e-node of the same op over the
classes its operands matched, its attributes equal or, where none is, the fewest integers apart (a
shape that grew with the batch). Whatever is found is the e-graph's, so it equals the program at the new
size by the rules alone; the template only decides which of the equal terms to take, as a cost model
would. None where some op has no counterpart (the rewrites that made it do not apply at this size).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eqsat.egraph import Encoding, Node, Serialized, attrs_of, input_classes, spec_of
from eqsat.ir import Op, Program


def following(
    graph: Serialized, enc: Encoding, program: Program, template: Program
) -> Callable[[str], Node] | None:
    """A node per class such that the program decoded from ``graph`` (the e-graph of ``program``) is
    ``template``'s ops over this size's classes; None where some op of it has no counterpart."""
    first = {cid: nodes[0] for cid, nodes in graph.classes.items()}
    choice: dict[str, Node] = {}
    place: dict[int, str] = {}
    leaves = _leaves(graph, enc, program, template)
    if leaves is None:
        return None
    place.update(leaves)
    by_operands = _by_operands(graph, enc, first)
    for op in template.live_ops():
        operands = tuple(place.get(id(v), "") for v in op.inputs)
        for index, out in enumerate(op.outputs):
            node = _closest(graph, enc, by_operands, op, index, operands)
            if node is None:
                return None
            # a class reached again (two of the template's values equal here) keeps its first node,
            # whose operands were placed before it: the choice stays acyclic
            choice.setdefault(node.eclass, node)
            place[id(out)] = node.eclass
    roots = [graph.roots[r] for r in enc.roots]
    if [place.get(id(v)) for v in template.outputs] != roots:
        return None
    return lambda cid: choice.get(cid) or first[cid]  # a variadic op's operand lists: as indexed


def _leaves(graph: Serialized, enc: Encoding, program: Program, template: Program) -> dict[int, str] | None:
    """The class of each of the template's inputs and parameters: the same leaf's of ``program``
    (inputs by position, parameters by name); None where they differ."""
    keys = {id(v): key for key, v in enc.leaves.items()}
    classes = {
        graph.value(node.children[0]): cid
        for cid, nodes in graph.classes.items()
        for node in nodes
        if node.op == "Input"
    }
    params = {p.name: p for p in program.params}
    if len(template.inputs) != len(program.inputs) or any(p.name not in params for p in template.params):
        return None
    pairs = [
        *zip(template.inputs, program.inputs, strict=True),
        *((p, params[p.name]) for p in template.params),
    ]
    found = {id(t): classes.get(keys.get(id(v), "")) for t, v in pairs}
    return None if None in found.values() else found  # type: ignore[return-value]


def _by_operands(
    graph: Serialized, enc: Encoding, first: Any
) -> dict[tuple[str, tuple[str, ...]], list[Node]]:
    """The tensor nodes by their op's name (an opaque node's op's) and the classes they read."""
    index: dict[tuple[str, tuple[str, ...]], list[Node]] = {}
    for nodes in graph.classes.values():
        for node in nodes:
            if node.op in ("TNil", "TCons", "Input"):
                continue
            spec = spec_of(node)
            name = spec.name if spec is not None else enc.opaque[graph.value(node.children[0])].name
            key = (name, tuple(input_classes(graph, node, first.__getitem__)))
            index.setdefault(key, []).append(node)
    return index


def _closest(
    graph: Serialized,
    enc: Encoding,
    by_operands: dict[tuple[str, tuple[str, ...]], list[Node]],
    op: Op,
    index: int,
    operands: tuple[str, ...],
) -> Node | None:
    """The node computing ``op``'s output ``index`` over ``operands``' classes: its attributes equal
    to the op's, else the fewest integers apart; None where none has the op's attributes' form."""
    candidates = by_operands.get((op.name, operands), [])
    best: tuple[int, Node] | None = None
    for node in candidates:
        distance = _distance(op, index, _attrs(graph, enc, node))
        if distance is not None and (best is None or distance < best[0]):
            best = (distance, node)
    return None if best is None else best[1]


def _attrs(graph: Serialized, enc: Encoding, node: Node) -> tuple[dict[str, Any], int]:
    """A node's op's attributes and which of its outputs the node is."""
    spec = spec_of(node)
    if spec is not None:
        return attrs_of(graph, node, spec), 0
    op = enc.opaque[graph.value(node.children[0])]
    return dict(op.attrs), graph.value(node.children[2])


def _distance(op: Op, index: int, found: tuple[dict[str, Any], int]) -> int | None:
    """How many integers of the op's attributes differ from ``found``'s; None where anything else
    does (a name, a float, a rank, the output)."""
    attrs, found_index = found
    if found_index != index or attrs.keys() != op.attrs.keys():
        return None
    return _apart(tuple(op.attrs.values()), tuple(attrs[key] for key in op.attrs))


def _apart(a: Any, b: Any) -> int | None:
    if isinstance(a, Sequence) and not isinstance(a, str):
        if not isinstance(b, Sequence) or isinstance(b, str) or len(a) != len(b):
            return None
        total = 0
        for x, y in zip(a, b, strict=True):
            part = _apart(x, y)
            if part is None:
                return None
            total += part
        return total
    if type(a) is int and type(b) is int:
        return int(a != b)
    return 0 if type(a) is type(b) and a == b else None
