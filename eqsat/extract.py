"""Extraction: choose one e-node per e-class so that the program reachable from the roots is cheapest.

``greedy_dag`` (the default) keeps, for every class, its best node and the set of classes its sub-DAG
uses, so a shared subterm is paid once; a node whose sub-DAG would contain its own class is never
chosen, so the result is acyclic.
"""

from __future__ import annotations

from collections.abc import Callable

from eqsat.cost import CostModel
from eqsat.egraph import Node, Serialized, attrs_of, input_classes, spec_of
from eqsat.ops import OPAQUE

Choice = Callable[[str], Node]


def node_costs(graph: Serialized, model: CostModel) -> dict[str, float]:
    """The cost of every tensor e-node under ``model`` (inputs and list cells cost nothing)."""
    costs = {}
    for cid, nodes in graph.classes.items():
        for node in nodes:
            spec = spec_of(node)
            if node.op == "Opaque":
                out = graph.types[cid]
                ins = [graph.types[c] for c in input_classes(graph, node, _first(graph))]
                costs[node.id] = model.op_cost(OPAQUE, {}, ins, out)
            elif spec is None:
                costs[node.id] = 0.0
            else:
                ins = [graph.types[c] for c in input_classes(graph, node, _first(graph))]
                costs[node.id] = model.op_cost(spec.name, attrs_of(graph, node, spec), ins, graph.types[cid])
    return costs


def _first(graph: Serialized) -> Choice:
    return lambda cid: graph.classes[cid][0]


def _children(graph: Serialized, node: Node) -> list[str]:
    return [c for c in node.children if c in graph.classes]


class Extraction:
    """A choice of one node per class; callable as ``choose(class) -> Node``."""

    def __init__(self, best: dict[str, tuple[float, dict[str, float], Node]]) -> None:
        self._best = best

    def __call__(self, cid: str) -> Node:
        return self._best[cid][2]

    def uses(self, cid: str) -> set[str]:
        """The classes in the sub-DAG chosen for ``cid`` (itself included)."""
        return set(self._best[cid][1])


def greedy_dag(graph: Serialized, model: CostModel) -> Extraction:
    """Greedy DAG extraction."""
    costs = node_costs(graph, model)
    best: dict[str, tuple[float, dict[str, float], Node]] = {}
    changed = True
    while changed:
        changed = False
        for cid, nodes in graph.classes.items():
            for node in nodes:
                kids = _children(graph, node)
                if any(k not in best for k in kids):
                    continue
                used: dict[str, float] = {}
                for k in kids:
                    used.update(best[k][1])
                if cid in used:
                    continue
                used[cid] = costs[node.id]
                total = sum(used.values())
                if cid not in best or total < best[cid][0] - 1e-9:
                    best[cid] = (total, used, node)
                    changed = True
    return Extraction(best)
