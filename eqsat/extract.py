"""Extraction: choose one e-node per e-class so that the program reachable from the roots is cheapest.

``greedy_dag`` keeps, for every class, its best node and the set of classes its sub-DAG uses, so a
shared subterm is paid once within a class's sub-DAG; a node whose sub-DAG would contain its own class
is never chosen, so the result is acyclic. It cannot see sharing across roots (three outputs reading one
merged matmul). ``ilp`` is exact: an integer program over the whole e-graph, solved by HiGHS with a time
limit and a greedy warm start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from eqsat.cost import CostModel
from eqsat.egraph import Node, Serialized, attrs_of, input_classes, spec_of
from eqsat.ops import FOLDABLE, OPAQUE

Choice = Callable[[str], Node]
TIE_BREAK = 1e-12  # far below any kernel's cost (a launch is ~1e-6 s), far above float rounding of sums


def node_costs(
    graph: Serialized, model: CostModel, constants: frozenset[str] = frozenset()
) -> dict[str, float]:
    """The cost of every tensor e-node under ``model`` (inputs and list cells cost nothing).

    A concat of constant classes (weights with known values, fulls) is packed once at compile time by
    XLA's constant folding, so it costs nothing at run time. Every op adds ``TIE_BREAK``: of programs
    of equal cost, the one of fewer ops wins (an attention op over the same kernels unfused).
    """
    costs = {}
    first = _first(graph)
    for cid, nodes in graph.classes.items():
        for node in nodes:
            spec = spec_of(node)
            classes = input_classes(graph, node, first)
            ins = [graph.types[c] for c in classes]
            if spec is not None and spec.name in FOLDABLE and set(classes) <= constants:
                costs[node.id] = 0.0
            elif node.op == "Opaque":
                costs[node.id] = model.op_cost(OPAQUE, {}, ins, graph.types[cid])
            elif spec is None:
                costs[node.id] = 0.0
            else:
                cost = model.op_cost(spec.name, attrs_of(graph, node, spec), ins, graph.types[cid])
                costs[node.id] = cost + TIE_BREAK
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


def greedy_dag(graph: Serialized, model: CostModel, constants: frozenset[str] = frozenset()) -> Extraction:
    """Greedy DAG extraction (``constants``: classes whose value is known at compile time)."""
    costs = node_costs(graph, model, constants)
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
                if cid not in best or total < best[cid][0] * (1 - 1e-12):
                    best[cid] = (total, used, node)
                    changed = True
    return Extraction(best)


def greedy_tree(graph: Serialized, model: CostModel, constants: frozenset[str] = frozenset()) -> Extraction:
    """Fast bottom-up extraction by tree cost (a shared subterm counted once per use), in O(nodes·updates).

    Used as the ILP's warm start on large e-graphs, where ``greedy_dag``'s per-class sub-DAG sets cost
    quadratic time. Every node costs at least a tiny epsilon, so a cycle can never be cheapest.
    """
    costs = node_costs(graph, model, constants)
    floor = 1e-9 * max(costs.values(), default=1.0) + 1e-300
    parents: dict[str, list[Node]] = {}
    for nodes in graph.classes.values():
        for n in nodes:
            for c in set(_children(graph, n)):
                parents.setdefault(c, []).append(n)
    best: dict[str, tuple[float, dict[str, float], Node]] = {}
    queue = deque(n for nodes in graph.classes.values() for n in nodes if not _children(graph, n))
    while queue:
        node = queue.popleft()
        kids = _children(graph, node)
        if any(k not in best for k in kids):
            continue
        total = max(costs[node.id], floor) + sum(best[k][0] for k in kids)
        if node.eclass not in best or total < best[node.eclass][0] * (1 - 1e-12):
            best[node.eclass] = (total, {}, node)
            queue.extend(parents.get(node.eclass, ()))
    return Extraction(best)


def ilp(
    graph: Serialized,
    model: CostModel,
    roots: list[str],
    constants: frozenset[str] = frozenset(),
    time_limit_s: float = 10.0,
    warm: Extraction | None = None,
) -> Extraction:
    """Exact DAG extraction as an integer program, solved by HiGHS.

    One binary per e-node; each root class picks a node; a picked node picks a node in each child
    class; acyclicity through an order variable per class (``t[a] >= t[b] + 1`` when a picked node of
    class ``a`` reads class ``b``). Warm-started from ``warm`` (greedy by default); if HiGHS finds
    nothing better within ``time_limit_s``, the warm start is returned.
    """
    import highspy

    warm = warm or greedy_tree(graph, model, constants)
    costs = node_costs(graph, model, constants)
    nodes = [n for ns in graph.classes.values() for n in ns]
    col = {n.id: i for i, n in enumerate(nodes)}
    cls = {c: len(nodes) + i for i, c in enumerate(graph.classes)}
    big = float(len(cls) + 1)
    scale = 1e6 / max(max(costs.values(), default=1.0), 1e-30)
    inf = highspy.kHighsInf
    rows: list[tuple[dict[int, float], float, float]] = []
    upper = [1.0] * len(nodes) + [big] * len(cls)
    for r in set(roots):
        rows.append(({col[n.id]: 1.0 for n in graph.classes[r]}, 1.0, inf))
    for n in nodes:
        for child in dict.fromkeys(_children(graph, n)):
            if child == n.eclass:
                upper[col[n.id]] = 0.0
                continue
            coeffs = {col[m.id]: 1.0 for m in graph.classes[child]}
            coeffs[col[n.id]] = coeffs.get(col[n.id], 0.0) - 1.0
            rows.append((coeffs, 0.0, inf))
            rows.append(({cls[n.eclass]: 1.0, cls[child]: -1.0, col[n.id]: -big}, 1.0 - big, inf))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(upper), len(rows)
    lp.col_cost_ = np.array([costs[n.id] * scale for n in nodes] + [0.0] * len(cls))
    lp.col_lower_ = np.zeros(len(upper))
    lp.col_upper_ = np.array(upper)
    lp.row_lower_ = np.array([lo for _, lo, _ in rows])
    lp.row_upper_ = np.array([hi for _, _, hi in rows])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    starts, index, value = [0], [], []
    for coeffs, _, _ in rows:
        index.extend(coeffs)
        value.extend(coeffs.values())
        starts.append(len(index))
    lp.a_matrix_.start_ = np.array(starts)
    lp.a_matrix_.index_ = np.array(index)
    lp.a_matrix_.value_ = np.array(value, dtype=np.double)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * len(nodes) + [highspy.HighsVarType.kContinuous] * len(
        cls
    )
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.passModel(lp)
    h.setSolution(_warm_solution(graph, warm, roots, col, cls, len(upper)))
    h.run()
    solution = h.getSolution()
    if not solution.value_valid:
        return warm
    x = solution.col_value
    best: dict[str, tuple[float, dict[str, float], Node]] = {}
    for cid, ns in graph.classes.items():
        picked = [n for n in ns if x[col[n.id]] > 0.5]
        if picked:
            node = min(picked, key=lambda n: costs[n.id])
            best[cid] = (costs[node.id], {cid: costs[node.id]}, node)
    chosen = Extraction(best)
    return chosen if all(r in best for r in roots) else warm


def _warm_solution(
    graph: Serialized, warm: Extraction, roots: list[str], col: dict[str, int], cls: dict[str, int], size: int
) -> Any:
    import highspy

    values = np.zeros(size)
    depth: dict[str, int] = {}
    for root in roots:  # post-order with an explicit stack: any depth
        stack = [root]
        while stack:
            cid = stack[-1]
            if cid in depth:
                stack.pop()
                continue
            node = warm(cid)
            pending = [c for c in _children(graph, node) if c not in depth]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            depth[cid] = 1 + max((depth[c] for c in _children(graph, node)), default=-1)
            values[col[node.id]] = 1.0
            values[cls[cid]] = depth[cid]
    sol = highspy.HighsSolution()
    sol.col_value = values
    return sol
