"""The runner: rules into egglog, one iteration at a time, within node, iteration and time limits.

Saturation is budgeted in work, as egg's runner is: iterations, e-nodes, and matches per rule per
iteration decide where it stops, so one program and one set of options give one e-graph on any machine
at any load. The wall clock (``Limits.timeout_s``) is a safety net for pathological programs, checked
between iterations; a run it stops is reported as cut short (``Stop.TIME_LIMIT``).
egglog's run API has no node limit or timeout, so the runner steps one iteration at a time and checks
the e-graph size and the clock between iterations. Each iteration re-runs the shape/dtype analyses to
a fixpoint, so guards see every new node's type. Rules run under egglog's back-off scheduler: a rule
matching more than ``match_limit`` times in an iteration is banned for a few iterations (its matches
dropped), which bounds how much one iteration can grow the e-graph before the limits are checked.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from eqsat.config import config
from eqsat.deadline import Deadline
from eqsat.egglog_text import ANALYSE, REWRITES, app, back_off, iteration
from eqsat.egraph import TENSOR_CTORS, new_egraph
from eqsat.rules import Rule

if TYPE_CHECKING:
    from egglog import bindings  # imported where used: a first call that hits the cache needs no egglog

# Analysis rules are named shape-*/dtype-* or unnamed (their key is their text); rewrite rules are named.
_ANALYSIS_RULES = ("shape-", "dtype-", "(")
_SIZE = re.compile(r"\((\S+) (\d+)\)")


@dataclass(frozen=True)
class Limits:
    """Bounds on saturation and extraction. The best program found when a bound is hit is still
    returned.

    The budget is work: ``max_iterations``, ``max_nodes`` (e-nodes), ``match_limit`` (matches of one
    rule in one iteration before egglog's back-off scheduler bans it for ``ban_length`` iterations)
    and ``ilp_max_nodes`` (branch-and-bound nodes of the exact extractor). Wall-clock limits are
    safety nets, sized never to fire on ordinary programs on a busy machine: ``timeout_s`` bounds the
    whole optimization but kernel timing, ``ilp_timeout_s`` the ILP solver, ``kernel_seconds`` the
    timing of kernels this device has not timed yet (default ``eqsat.config.kernel_seconds``; 0: none
    are timed, the roofline estimates them). A result one of them cut short says so and is not cached."""

    max_iterations: int = 30
    max_nodes: int = 20_000
    timeout_s: float = 60.0
    match_limit: int = 2_000
    ban_length: int = 5
    ilp_max_nodes: int = 1_000
    ilp_timeout_s: float = 10.0
    kernel_seconds: float = field(default_factory=lambda: config.kernel_seconds)

    def budget(self) -> str:
        """The work bounds, which decide a result (the safety nets do not, unless they cut it short)."""
        work = ("max_iterations", "max_nodes", "match_limit", "ban_length", "ilp_max_nodes")
        return " ".join(f"{name}={getattr(self, name)}" for name in work)


@dataclass
class Iteration:
    """What one iteration did: e-graph size after it, matches per rule, seconds."""

    index: int
    nodes: int
    classes: int
    matches: dict[str, int]
    seconds: float

    def by_rule(self) -> dict[str, int]:
        """Matches per rule (its variants ``name#i`` added up), rules that matched only."""
        total: dict[str, int] = {}
        for name, n in self.matches.items():
            if n:
                base = name.split("#", 1)[0]
                total[base] = total.get(base, 0) + n
        return total


class Stop(StrEnum):
    """Why saturation stopped (egg's ``StopReason``)."""

    SATURATED = "saturated"
    GOAL_REACHED = "goal reached"
    ITERATION_LIMIT = "iteration limit"
    NODE_LIMIT = "node limit"
    TIME_LIMIT = "time limit"
    ERROR = "error"  # egglog failed: the input is returned


@dataclass(frozen=True)
class StopReason:
    """A ``Stop`` and what it was about (the limit, the size that passed it)."""

    stop: Stop
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.stop} ({self.detail})" if self.detail else str(self.stop)

    @classmethod
    def time_limit(cls, seconds: float) -> StopReason:
        return cls(Stop.TIME_LIMIT, f"{seconds:g} s")

    @classmethod
    def node_limit(cls, detail: str) -> StopReason:
        return cls(Stop.NODE_LIMIT, detail)


@dataclass
class SaturationReport:
    """The iterations, why saturation stopped, how long it took, and the alternatives program rules
    (``Rule.proposal``) added as the program loaded, by rule."""

    iterations: list[Iteration] = field(default_factory=list)
    stop_reason: StopReason | None = None  # None while it runs
    seconds: float = 0.0
    proposed: dict[str, int] = field(default_factory=dict)
    # egglog commands that made the e-graph from ``start()``: the scheduler's setup, then each iteration
    # kept (``states`` rebuilds it as it was after each)
    commands: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def saturated(self) -> bool:
        return self.stopped(Stop.SATURATED)

    def stopped(self, stop: Stop) -> bool:
        """Whether saturation stopped for this reason."""
        return self.stop_reason is not None and self.stop_reason.stop == stop

    def rules_fired(self) -> dict[str, int]:
        """Total matches per rule (variants of one rule added up), rules that matched only; a program
        rule's alternatives count as its matches. By name: egglog reports them in no fixed order."""
        total: dict[str, int] = dict(self.proposed)
        for it in self.iterations:
            for name, n in it.by_rule().items():
                total[name] = total.get(name, 0) + n
        return dict(sorted(total.items()))


def sizes(egraph: bindings.EGraph) -> tuple[int, int]:
    """(tensor e-nodes, tensor e-classes): constructor rows, and rows of the shape analysis."""
    (out,) = egraph.parse_and_run_program(app("print-size"))
    table = {name: int(n) for name, n in _SIZE.findall(str(out))}
    nodes = sum(n for name, n in table.items() if name in TENSOR_CTORS)
    return nodes, table.get("shape", 0)


def install(egraph: bindings.EGraph, rules: Iterable[Rule]) -> None:
    """Add rules to the e-graph's rewrite ruleset."""
    rules = list(rules)
    preludes = dict.fromkeys(line for r in rules for line in r.prelude)
    text = "\n".join([*preludes, *(line for r in rules for line in r.egglog(REWRITES))])
    if text:
        egraph.parse_and_run_program(text)


class _Prepared(threading.local):
    """Per thread: e-graphs holding the schema and one rule set, by rule set (the latest few); and one
    e-graph that holds the schema with a small rule set pushed over it, switched by popping."""

    def __init__(self) -> None:
        self.egraphs: dict[tuple[Rule, ...], bindings.EGraph] = {}
        self.small: bindings.EGraph | None = None
        self.small_key: tuple[Rule, ...] | None = None


_PREPARED = _Prepared()
_PREPARED_KEPT = 4
SMALL_RULE_SET = 32  # rule sets up to this size install in ms: they share one schema e-graph


class _Incoming:
    """An e-graph being made with a rule set in a background thread (``prepare``)."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.done = threading.Event()
        self.egraph: bindings.EGraph | None = None
        threading.Thread(target=self._make, args=(rules,), daemon=True, name="eqsat-prepare").start()

    def _make(self, rules: Sequence[Rule]) -> None:
        try:
            egraph = new_egraph()
            install(egraph, rules)
            self.egraph = egraph
        except BaseException:  # the caller then makes it itself, and sees the error there
            pass
        finally:
            self.done.set()


_INCOMING: dict[tuple[Rule, ...], _Incoming] = {}
_INCOMING_LOCK = threading.Lock()


def _forget_incoming() -> None:
    """In a forked child: the threads making e-graphs did not come along, so nothing is on its way."""
    global _INCOMING_LOCK
    _INCOMING.clear()
    _INCOMING_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_incoming)


def prepare(rules: Sequence[Rule]) -> None:
    """Start making the e-graph of ``rules`` (schema and rules installed, ~0.2-0.3 s) in a background
    thread, for the next ``fresh_egraph(rules)`` in any thread to take. egglog releases the GIL while
    it compiles rules, so the work overlaps the caller's (``eqsat.jit`` calls it when it decorates a
    function and again before it traces one). Nothing is started where the calling thread has that
    e-graph already, one is on its way, or the rule set is small."""
    key = tuple(rules)
    if len(key) <= SMALL_RULE_SET or key in _PREPARED.egraphs:
        return
    with _INCOMING_LOCK:
        if key not in _INCOMING:
            _INCOMING[key] = _Incoming(key)


def _take_incoming(key: tuple[Rule, ...]) -> bindings.EGraph | None:
    """The e-graph ``prepare`` made for ``key`` (waiting for it), if one was started."""
    with _INCOMING_LOCK:
        incoming = _INCOMING.pop(key, None)
    if incoming is None:
        return None
    incoming.done.wait()
    return incoming.egraph


def fresh_egraph(rules: Sequence[Rule]) -> bindings.EGraph:
    """An e-graph with the schema and ``rules`` installed and nothing else. Installing the rules takes
    ~0.2-0.3 s, so each rule set's e-graph is made once (per thread; or beforehand by ``prepare``) and
    handed out again reset to that state: egglog's ``push`` saves it (a copy of an e-graph with no
    terms, ~0.05 s), ``pop`` restores it. Small rule sets (a proof cut down to the rules it needs)
    share one e-graph made with the schema, the rules pushed over it. An e-graph handed out before is
    reset by the next call for the same rules (for small rule sets: by the next call for any small
    rule set)."""
    key = tuple(rules)
    if len(key) <= SMALL_RULE_SET:
        return _small(key)
    egraphs = _PREPARED.egraphs
    egraph = egraphs.pop(key, None)
    if egraph is None:
        egraph = _take_incoming(key)
        if egraph is None:
            egraph = new_egraph()
            install(egraph, rules)
    else:
        egraph.parse_and_run_program(app("pop"))
    egraph.parse_and_run_program(app("push"))
    egraphs[key] = egraph  # most recently used last
    while len(egraphs) > _PREPARED_KEPT:
        del egraphs[next(iter(egraphs))]
    return egraph


def _small(key: tuple[Rule, ...]) -> bindings.EGraph:
    """The shared e-graph reset to the schema with the small rule set ``key``: two pushes deep (the
    schema saved below the rules, the rules below the program)."""
    prepared = _PREPARED
    if prepared.small is None:
        prepared.small = new_egraph()
    egraph = prepared.small
    if prepared.small_key == key:
        egraph.parse_and_run_program(app("pop") + "\n" + app("push"))
        return egraph
    if prepared.small_key is not None:
        egraph.parse_and_run_program(app("pop") + "\n" + app("pop"))
        prepared.small_key = None
    egraph.parse_and_run_program(app("push"))
    try:
        install(egraph, key)
    except BaseException:  # a rule egglog refuses (Rust panics are BaseException): start over next time
        prepared.small = None
        raise
    egraph.parse_and_run_program(app("push"))
    prepared.small_key = key
    return egraph


NODE_SLACK = 1.1  # the e-graph may end this far above max_nodes, never further


def states(start: Callable[[], bindings.EGraph], commands: Sequence[str]) -> Iterator[bindings.EGraph]:
    """The e-graph ``start()`` makes, then as it is after each of ``commands`` (one e-graph, changed
    in place: read it before the next). egglog is deterministic, so this is the e-graph as it was."""
    egraph = start()
    yield egraph
    for command in commands:
        egraph.parse_and_run_program(command)
        yield egraph


class _Replayable:
    """An e-graph and the commands that made it from a fresh start, so it can be rebuilt as it was
    after any iteration (egglog's push/pop copies the whole e-graph each time)."""

    def __init__(self, start: Callable[[], bindings.EGraph], limits: Limits) -> None:
        self.start = start
        self.commands = [back_off("backoff", limits.match_limit, limits.ban_length) + "\n" + ANALYSE]
        self.egraph = self._rebuilt()

    def _rebuilt(self) -> bindings.EGraph:
        *_, egraph = states(self.start, self.commands)
        return egraph

    def step(self, commands: str) -> Any:
        """Run one iteration's commands; its run report."""
        from egglog import bindings

        out = self.egraph.parse_and_run_program(commands)[-1]
        self.commands.append(commands)
        if not isinstance(out, bindings.RunScheduleOutput):
            raise TypeError(f"an iteration ended in {type(out).__name__}, not a run report")
        return out.report

    def rewind(self, iterations: int) -> None:
        """Rebuild the e-graph as it was after the first ``iterations`` iterations."""
        del self.commands[1 + iterations :]
        self.egraph = self._rebuilt()


def saturate(
    start: Callable[[], bindings.EGraph],
    limits: Limits | None = None,
    progress: Callable[[Iteration], None] | None = None,
    goal: Callable[[bindings.EGraph], bool] | None = None,
    deadline: Deadline | None = None,
) -> tuple[bindings.EGraph, SaturationReport]:
    """Run the installed rules until saturation or a limit (or until ``goal(egraph)`` holds, checked
    after each iteration); the saturated e-graph and a report.

    ``start()`` makes the e-graph to saturate: the program encoded, the rules installed. Limits hold:
    the e-graph never ends above ``NODE_SLACK`` x ``max_nodes`` e-nodes. An iteration that overshoots
    (one rule's matches can multiply the e-graph) is undone by replaying the iterations before it,
    then retried with only the rules whose matches fit the room left; if that overshoots too, it is
    undone and saturation stops at the last iteration that fit. No iteration starts when the previous
    one passed the ``deadline`` (by default ``timeout_s`` from now): a safety net, not the budget.
    """
    limits = limits or Limits()
    deadline = deadline or Deadline(limits.timeout_s)
    report = SaturationReport()
    t_start = deadline.elapsed()
    cap = int(NODE_SLACK * limits.max_nodes)
    run = _Replayable(start, limits)
    nodes, _ = sizes(run.egraph)
    now = deadline.elapsed()
    for index in range(limits.max_iterations):
        if nodes > limits.max_nodes:
            report.stop_reason = StopReason.node_limit(f"{nodes} > {limits.max_nodes} e-nodes")
            break
        if now >= deadline.seconds:  # the safety net: work, not the clock, bounds an ordinary run
            report.stop_reason = StopReason.time_limit(deadline.seconds)
            break
        result = run.step(iteration("backoff"))
        size = sizes(run.egraph)
        if size[0] > cap:
            result, size = _retry_within(run, index, result, nodes, size[0], cap)
            report.stop_reason = StopReason.node_limit(f"the next iteration passes {cap} e-nodes")
        nodes, classes = size
        matches = {k: v for k, v in result.num_matches_per_rule.items() if not k.startswith(_ANALYSIS_RULES)}
        began, now = now, deadline.elapsed()
        it = Iteration(index, nodes, classes, matches, now - began)
        report.iterations.append(it)
        if progress:
            progress(it)
        if report.stop_reason:
            break
        if goal is not None and goal(run.egraph):
            report.stop_reason = StopReason(Stop.GOAL_REACHED)
        elif not result.updated and result.can_stop:
            report.stop_reason = StopReason(Stop.SATURATED)
        elif nodes > limits.max_nodes:
            report.stop_reason = StopReason.node_limit(f"{nodes} > {limits.max_nodes} e-nodes")
        if report.stop_reason:
            break
    else:
        report.stop_reason = StopReason(Stop.ITERATION_LIMIT, str(limits.max_iterations))
    report.seconds = now - t_start
    report.commands = tuple(run.commands)
    return run.egraph, report


def _retry_within(
    run: _Replayable, index: int, failed: Any, before: int, after: int, cap: int
) -> tuple[Any, tuple[int, int]]:
    """Undo iteration ``index`` (it grew ``before`` -> ``after`` > ``cap`` e-nodes) and rerun it with a
    match limit that admits only the rules whose matches fit the room left; undo that too if it
    still overshoots. Returns the iteration's report (or an empty one) and the e-graph's size."""
    matches = sorted(
        n for name, n in failed.num_matches_per_rule.items() if n and not name.startswith(_ANALYSIS_RULES)
    )
    per_match = (after - before) / max(1, sum(matches))
    room, admitted, limit = cap - before, 0, 0
    for n in matches:
        if (admitted + n) * per_match > room / 2:
            break
        admitted, limit = admitted + n, n
    run.rewind(index)
    if limit:
        scheduler = f"within{index}"
        result = run.step(back_off(scheduler, limit, 1) + "\n" + iteration(scheduler))
        size = sizes(run.egraph)
        if size[0] <= cap:
            return result, size
        run.rewind(index)
    return _EmptyRun(), sizes(run.egraph)


class _EmptyRun:
    """The report of an iteration that was undone: nothing matched, nothing changed."""

    num_matches_per_rule: dict[str, int] = {}  # noqa: RUF012
    updated = False
    can_stop = False
