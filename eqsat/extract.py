"""Extraction: choose one e-node per e-class so that the program reachable from the roots is cheapest.

``greedy_dag`` keeps, for every class, its best node and the set of classes its sub-DAG uses, so a
shared subterm is paid once within a class's sub-DAG; a node whose sub-DAG would contain its own class
is never chosen, so the result is acyclic. It cannot see sharing across roots (three outputs reading one
merged matmul). ``ilp`` is exact: an integer program over the classes the roots reach (one per group
of roots that share nothing to choose), solved by HiGHS with a time limit and a greedy warm start.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from eqsat.cost import CostModel
from eqsat.cost.kernels import Call
from eqsat.deadline import Deadline
from eqsat.egraph import Node, Serialized, attrs_of, input_classes, spec_of
from eqsat.ops import OPAQUE, folds

Choice = Callable[[str], Node]
TIE_BREAK = 1e-12  # far below any kernel's cost (a launch is ~1e-6 s), far above float rounding of sums


def node_costs(
    graph: Serialized, model: CostModel, constants: frozenset[str] = frozenset()
) -> dict[str, float]:
    """The cost of every tensor e-node under ``model`` (inputs and list cells cost nothing).

    A foldable op of ``constants`` (weights packed, laid out or rescaled) is computed once at compile
    time by XLA's constant folding, so it costs nothing at run time. Every op adds ``TIE_BREAK``: of programs
    of equal cost, the one of fewer ops wins (an attention op over the same kernels unfused).
    """
    costs = {}
    first = _first(graph)
    fulls = {cid for cid, nodes in graph.classes.items() if any(n.op == "Full" for n in nodes)}
    for cid, nodes in graph.classes.items():
        for node in nodes:
            spec = spec_of(node)
            classes = input_classes(graph, node, first)
            ins = [graph.types[c] for c in classes]
            if spec is not None and folds(spec.name, set(classes), constants, fulls):
                costs[node.id] = 0.0
            elif node.op == "Opaque":
                costs[node.id] = model.op_cost(OPAQUE, {}, ins, graph.types[cid])
            elif spec is None:
                costs[node.id] = 0.0
            else:  # a timed kernel's cost depends on which operands are weights: ``Call.constant``
                costs[node.id] = model.call_cost(_call(graph, node, cid, classes, constants)) + TIE_BREAK
    return costs


def _call(graph: Serialized, node: Node, cid: str, classes: list[str], constants: frozenset[str]) -> Call:
    """The op ``node`` of class ``cid`` applies to ``classes``, those of ``constants`` known at compile
    time."""
    spec = spec_of(node)
    assert spec is not None
    known = tuple(c in constants for c in classes)
    ins = tuple(graph.types[c] for c in classes)
    return Call(spec.name, attrs_of(graph, node, spec), ins, graph.types[cid], known)


def alternatives(
    graph: Serialized, ops: frozenset[str], constants: frozenset[str] = frozenset()
) -> list[list[Call]]:
    """Per e-class, the calls of its e-nodes that apply one of ``ops`` (a cost model's ``timed_ops``),
    the operands of ``constants`` known at compile time: the alternatives whose timings could change
    what extraction chooses."""
    if not ops:
        return []
    first = _first(graph)
    found = []
    for cid, nodes in graph.classes.items():
        calls = []
        for node in nodes:
            spec = spec_of(node)
            if spec is not None and spec.name in ops:
                call = _call(graph, node, cid, input_classes(graph, node, first), constants)
                if not all(call.known):  # computed at compile time otherwise: free
                    calls.append(call)
        if calls:
            found.append(calls)
    return found


def _first(graph: Serialized) -> Choice:
    return lambda cid: graph.classes[cid][0]


def _children(graph: Serialized, node: Node) -> list[str]:
    return [c for c in node.children if c in graph.classes]


class Extraction:
    """A choice of one node per class; callable as ``choose(class) -> Node``."""

    def __init__(
        self, best: dict[str, tuple[float, dict[str, float], Node]], timed_out: bool = False
    ) -> None:
        self._best = best
        self.timed_out = timed_out  # a solver's time limit, not its work bound, ended the search

    def __call__(self, cid: str) -> Node:
        return self._best[cid][2]

    def restricted(self, classes: set[str]) -> dict[str, tuple[float, dict[str, float], Node]]:
        """The choices for ``classes`` (those it has)."""
        return {c: self._best[c] for c in classes if c in self._best}

    def uses(self, cid: str) -> set[str]:
        """The classes in the sub-DAG chosen for ``cid`` (itself included)."""
        return set(self._best[cid][1])


def taken_together(graph: Serialized, choice: Choice, shared: str, values: list[str]) -> Choice | None:
    """``choice``, but each class of ``values`` (let names) computed from the class of ``shared`` (the
    value a group of alternatives shares, ``eqsat.stacking``): a greedy choice pays the shared value in
    full in each class and never takes it. None where the group cannot be taken (a class has no node
    reading it, or the choice would be cyclic)."""
    source = graph.roots[shared]
    forced: dict[str, Node] = {}
    for name in values:
        cid = graph.roots[name]
        node = next((n for n in graph.classes[cid] if source in n.children), None)
        if node is None:
            return None
        forced[cid] = node

    def chosen(cid: str) -> Node:
        return forced.get(cid) or choice(cid)

    return chosen if _acyclic(graph, chosen, list(forced)) else None


def _acyclic(graph: Serialized, choice: Choice, starts: list[str]) -> bool:
    """Whether following ``choice`` from ``starts`` never comes back to a class on the way."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for start in starts:
        stack = [(start, iter(_children(graph, choice(start))))]
        if state.get(start):
            continue
        state[start] = 1
        while stack:
            cid, kids = stack[-1]
            kid = next(kids, None)
            if kid is None:
                state[cid] = 2
                stack.pop()
            elif state.get(kid) == 1:
                return False
            elif kid not in state and kid in graph.classes:
                state[kid] = 1
                stack.append((kid, iter(_children(graph, choice(kid)))))
    return True


def greedy_dag(
    graph: Serialized,
    model: CostModel,
    constants: frozenset[str] = frozenset(),
    deadline: Deadline | None = None,
) -> Extraction:
    """Greedy DAG extraction (``constants``: classes whose value is known at compile time); raises
    ``eqsat.deadline.TimeLimit`` once ``deadline`` passes."""
    costs = node_costs(graph, model, constants)
    best: dict[str, tuple[float, dict[str, float], Node]] = {}
    changed = True
    while changed:
        if deadline is not None:
            deadline.check("during extraction")
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


def greedy_tree(
    graph: Serialized,
    model: CostModel,
    constants: frozenset[str] = frozenset(),
    deadline: Deadline | None = None,
) -> Extraction:
    """Fast bottom-up extraction by tree cost (a shared subterm counted once per use), in O(nodes·updates).

    Used as the ILP's warm start on large e-graphs, where ``greedy_dag``'s per-class sub-DAG sets cost
    quadratic time. Every node costs at least a tiny epsilon, so a cycle can never be cheapest. Raises
    ``eqsat.deadline.TimeLimit`` once ``deadline`` passes.
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
    steps = 0
    while queue:
        steps += 1
        if deadline is not None and steps % 4096 == 0:
            deadline.check("during extraction")
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
    max_nodes: int = 1_000,
) -> Extraction:
    """Exact DAG extraction as an integer program, solved by HiGHS.

    One binary per e-node; each root class picks one node, every other class at most one; a picked
    node picks a node in each child class (and, tightening the relaxation, in each class its class
    needs whatever it picks: see ``_rows``); acyclicity through an order variable per class on a
    cycle (``t[a] >= t[b] + 1`` when a picked node of class ``a`` reads class ``b``). Warm-started
    from ``warm`` (greedy by default). The search is bounded in work, ``max_nodes`` branch-and-bound
    nodes per independent part (HiGHS is deterministic: the same graph gives the same choice at any
    load), and by ``time_limit_s`` in all as a safety net (``Extraction.timed_out`` says it fired);
    the best solution found within them is returned, the warm start if none is better.
    """
    warm = warm or greedy_tree(graph, model, constants)
    costs = node_costs(graph, model, constants)
    deadline = time.perf_counter() + time_limit_s
    best: dict[str, tuple[float, dict[str, float], Node]] = {}
    timed_out = False
    for group, classes in _independent(graph, roots):
        left = max(deadline - time.perf_counter(), 0.01)
        found, stopped = _solve(graph, costs, group, classes, left, max_nodes, warm)
        best |= found
        timed_out |= stopped
    return Extraction(best, timed_out) if all(r in best for r in roots) else Extraction(warm._best, timed_out)


def _components(graph: Serialized, classes: set[str]) -> tuple[dict[str, int], list[str]]:
    """The classes on a cycle of the class graph (class -> the child classes its nodes read), each
    with the number of its strongly connected component; and ``classes`` in the order their
    components complete, each after the classes it reads where no cycle prevents it (Tarjan's
    algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: dict[str, int] = {}
    order: list[str] = []
    components = 0

    for root in classes:
        if root in index:
            continue
        work = [(root, _class_children(graph, root, classes))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            c, it = work[-1]
            child = next(it, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[c])
                if low[c] == index[c]:
                    members = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        members.append(m)
                        if m == c:
                            break
                    order.extend(members)
                    if len(members) > 1:
                        found.update(dict.fromkeys(members, components))
                        components += 1
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, _class_children(graph, child, classes)))
            elif child in on_stack:
                low[c] = min(low[c], index[child])
    return found, order


def _class_children(graph: Serialized, cid: str, classes: set[str]) -> Iterator[str]:
    """The classes among ``classes`` that nodes of ``cid`` read, each once."""
    return iter(dict.fromkeys(k for n in graph.classes[cid] for k in _children(graph, n) if k in classes))


def _reachable(graph: Serialized, root: str) -> set[str]:
    seen, stack = {root}, [root]
    while stack:
        for node in graph.classes[stack.pop()]:
            for child in _children(graph, node):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    return seen


def _independent(graph: Serialized, roots: list[str]) -> list[tuple[list[str], set[str]]]:
    """The roots in groups that share no class with a choice or an operand (a program of several
    independent parts: each part's integer program is solved on its own), with each group's classes.
    Leaf classes of one node (an input, a constant) may be shared: there is nothing to choose there."""
    groups: list[tuple[list[str], set[str]]] = []
    for root in dict.fromkeys(roots):
        classes = _reachable(graph, root)
        coupling = {c for c in classes if len(graph.classes[c]) > 1 or _children(graph, graph.classes[c][0])}
        merged = [g for g in groups if coupling & g[1]]
        for g in merged:
            groups.remove(g)
        groups.append(([r for g in merged for r in g[0]] + [root], classes.union(*(g[1] for g in merged))))
    return groups


class _Solvers(threading.local):
    highs: Any = None


_SOLVERS = _Solvers()


def _silently(make: Callable[[], Any]) -> Any:
    """``make()`` with the process's stdout closed: HiGHS prints its banner from C when it starts,
    before any option can silence it."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return make()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solver() -> Any:
    """This thread's HiGHS solver, emptied (making one costs ~25 ms: highspy sets up its callbacks)."""
    import highspy

    if _SOLVERS.highs is None:
        _SOLVERS.highs = _silently(highspy.Highs)
        _SOLVERS.highs.setOptionValue("output_flag", False)
    _SOLVERS.highs.clearModel()
    return _SOLVERS.highs


def _solve(
    graph: Serialized,
    costs: dict[str, float],
    roots: list[str],
    classes: set[str],
    time_limit_s: float,
    max_nodes: int,
    warm: Extraction,
) -> tuple[dict[str, tuple[float, dict[str, float], Node]], bool]:
    """The integer program over ``classes`` (those reachable from ``roots``): the choice per class
    HiGHS finds, or the warm start's where it finds no solution; and whether its time limit fired."""
    import highspy

    lp, col, cls = _program(graph, costs, roots, classes)
    h = _solver()
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_max_nodes", int(max_nodes))
    h.passModel(lp)
    h.setSolution(_warm_solution(graph, warm, roots, col, cls, lp.num_col_))
    h.run()
    timed_out = h.getModelStatus() == highspy.HighsModelStatus.kTimeLimit
    solution = h.getSolution()
    if not solution.value_valid:
        return warm.restricted(classes), timed_out
    x = solution.col_value
    best: dict[str, tuple[float, dict[str, float], Node]] = {}
    for cid in classes:
        picked = [n for n in graph.classes[cid] if x[col[n.id]] > 0.5]
        if picked:
            node = min(picked, key=lambda n: costs[n.id])
            best[cid] = (costs[node.id], {cid: costs[node.id]}, node)
    return best, timed_out


def _program(
    graph: Serialized, costs: dict[str, float], roots: list[str], classes: set[str]
) -> tuple[Any, dict[str, int], dict[str, int]]:
    """The integer program (a ``highspy.HighsLp``): a binary column per node of ``classes`` (its
    cost, scaled), an order column per class on a cycle; the columns of nodes and classes by id."""
    import highspy

    nodes = [n for c in graph.classes if c in classes for n in graph.classes[c]]
    col = {n.id: i for i, n in enumerate(nodes)}
    component, order = _components(graph, classes)  # only a class on a cycle needs an order variable
    cls = {c: len(nodes) + i for i, c in enumerate(c for c in graph.classes if c in component)}
    scale = 1e6 / max(max((costs[n.id] for n in nodes), default=1.0), 1e-30)
    rows, upper = _rows(graph, order, set(roots), col, cls, component)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = len(upper), len(rows)
    lp.col_cost_ = np.array([costs[n.id] * scale for n in nodes] + [0.0] * len(cls))
    lp.col_lower_ = np.zeros(len(upper))
    lp.col_upper_ = np.array(upper)
    lp.row_lower_ = np.array([lo for _, lo, _ in rows])
    lp.row_upper_ = np.array([hi for _, _, hi in rows])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    starts: list[int] = [0]
    index: list[int] = []
    value: list[float] = []
    for coeffs, _, _ in rows:
        index.extend(coeffs)
        value.extend(coeffs.values())
        starts.append(len(index))
    lp.a_matrix_.start_ = np.array(starts)
    lp.a_matrix_.index_ = np.array(index)
    lp.a_matrix_.value_ = np.array(value, dtype=np.double)
    integer, continuous = highspy.HighsVarType.kInteger, highspy.HighsVarType.kContinuous
    lp.integrality_ = [integer] * len(nodes) + [continuous] * len(cls)
    return lp, col, cls


Row = tuple[dict[int, float], float, float]  # coefficients by column, lower bound, upper bound


def _rows(
    graph: Serialized,
    classes: list[str],
    roots: set[str],
    col: dict[str, int],
    cls: dict[str, int],
    component: dict[str, int],
) -> tuple[list[Row], list[float]]:
    """The constraints of the integer program over ``classes`` (children first), and the columns'
    upper bounds.

    At most one node per class (exactly one per root): every optimal choice is one, and it makes a
    class's readers additive, so the LP relaxation cannot cover a child class once for several
    readers picked fractionally. A class is picked at least as often as its readers in each class;
    and at least as often as each class that needs it whatever that class picks (``_needed``): without
    these, splitting a class between a fused op and its unfused form (which reach the same operands by
    different paths) halves the cost of everything below in the relaxation, and HiGHS spends its time
    limit closing the gap."""
    inf = math.inf
    big = float(len(cls) + 1)
    upper = [1.0] * len(col) + [big] * len(cls)
    rows: list[Row] = []

    def picked(c: str) -> dict[int, float]:
        return {col[n.id]: 1.0 for n in graph.classes[c]}

    def covers(child: str, readers: Iterable[int]) -> Row:
        coeffs = picked(child)
        for i in readers:
            coeffs[i] = coeffs.get(i, 0.0) - 1.0
        return coeffs, 0.0, inf

    for c in classes:
        if c in roots or len(graph.classes[c]) > 1:
            rows.append((picked(c), 1.0 if c in roots else 0.0, 1.0))
    readers: dict[tuple[str, str], list[int]] = {}
    for c in classes:
        for n in graph.classes[c]:
            for child in dict.fromkeys(_children(graph, n)):
                if child == c:
                    upper[col[n.id]] = 0.0
                    continue
                readers.setdefault((c, child), []).append(col[n.id])
                if component.get(child, -1) == component.get(c, -2):  # an edge that may close a cycle
                    rows.append(({cls[c]: 1.0, cls[child]: -1.0, col[n.id]: -big}, 1.0 - big, inf))
    rows.extend(covers(child, nodes) for (_, child), nodes in readers.items())
    for c, needs in _needed(graph, classes).items():
        rows.extend(covers(x, picked(c)) for x in needs)
    return rows, upper


def _needed(graph: Serialized, order: list[str]) -> dict[str, list[str]]:
    """For each class of several nodes, the classes it needs whatever node it picks (each node reads
    them, directly or through classes that need them), less those its other constraints imply: the
    classes all its nodes read, what they need, and what another needed class needs. Bit sets over
    ``order`` (children first), so one pass suffices off cycles; on them, passes until nothing
    changes."""
    bit = {c: 1 << i for i, c in enumerate(order)}
    needs = dict.fromkeys(order, 0)  # as a bit set: the classes each class needs

    def reach(node: Node, cid: str) -> int:
        out = 0
        for k in _children(graph, node):
            if k != cid and k in bit:
                out |= needs[k] | bit[k]
        return out

    changed = True
    while changed:
        changed = False
        for cid in order:
            mask = -1
            for node in graph.classes[cid]:
                mask &= reach(node, cid)
            if mask & ~needs[cid]:
                needs[cid] |= mask
                changed = True
    out: dict[str, list[str]] = {}
    for cid in order:
        nodes = graph.classes[cid]
        if len(nodes) < 2:
            continue
        common = set(_children(graph, nodes[0])).intersection(*(_children(graph, n) for n in nodes[1:]))
        rest = needs[cid]
        for k in common - {cid}:
            rest &= ~(needs[k] | bit[k])
        for k in _bits(rest, order):
            rest &= ~needs[k]
        out[cid] = list(_bits(rest, order))
    return out


def _bits(mask: int, order: list[str]) -> Iterable[str]:
    while mask:
        low = mask & -mask
        yield order[low.bit_length() - 1]
        mask ^= low


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
            if cid in cls:
                values[cls[cid]] = depth[cid]
    sol = highspy.HighsSolution()
    sol.col_value = values
    return sol
