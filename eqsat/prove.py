"""Proofs of equivalence: are two programs equal under the rules, and by which rule applications?

Both programs, with their unit dims canonicalized as ``optimize`` does (``layout.drop_unit_dims``, exact),
go into one e-graph, reading the same inputs (by position); saturation stops as soon as
each output of one shares an e-class with the same output of the other. The explanation is the
project's own record: the rules are cut down to a set of which each one is needed (saturating without
any one of them no longer proves it), and the proof lists, per iteration of saturation with exactly
those rules, how often each matched. "Not proven" is never "not equal": the rules may be incomplete,
or a limit may have stopped saturation first.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eqsat.egglog_text import app, equal
from eqsat.egraph import encode
from eqsat.errors import ShapeError
from eqsat.ir import Op, Program, Value
from eqsat.rules import ALL, Rule, resolve
from eqsat.saturate import Limits, SaturationReport, Stop, fresh_egraph, saturate
from eqsat.unit_dims import drop_unit_dims

if TYPE_CHECKING:
    from egglog import bindings  # imported where used: a first call that hits the cache needs no egglog

ProgramLike = Program | Callable[..., Any]


@dataclass(frozen=True)
class Step:
    """One iteration of the proof's saturation: how often each rule matched in it."""

    iteration: int
    matches: dict[str, int]


@dataclass
class Equivalence:
    """Whether two programs were proven equal; when they were, the rules needed and the steps."""

    proven: bool
    reason: str
    rules: tuple[str, ...] = ()
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0

    def __bool__(self) -> bool:
        return self.proven

    def __str__(self) -> str:
        if not self.proven:
            return f"not proven: {self.reason}"
        if not self.rules:
            return f"proven equal: {self.reason}"
        lines = [
            f"proven equal in {_count(len(self.steps), 'iteration')} with {_count(len(self.rules), 'rule')}"
            f", each needed (without any one of them it is not proven): {', '.join(self.rules)}"
        ]
        for step in self.steps:
            fired = ", ".join(f"{name} x{n}" for name, n in sorted(step.matches.items()))
            lines.append(f"  iteration {step.iteration + 1}: {fired or '(rebuilding only)'}")
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def equivalent(
    f: ProgramLike,
    g: ProgramLike,
    *example_args: Any,
    rules: Iterable[Rule | str] | None = None,
    limits: Limits | None = None,
) -> Equivalence:
    """Prove ``f`` and ``g`` (JAX functions traced at ``example_args``, or Programs with the same
    inputs) equal by saturating both in one e-graph with ``rules`` (default: every rule, the axioms
    off by default in ``optimize`` included). Returns an ``Equivalence``: truthy when proven, and
    printed as its explanation."""
    t0 = time.perf_counter()
    chosen = resolve(rules, [ALL])
    limits = limits or Limits()
    a, b = (drop_unit_dims(_program(p, example_args)) for p in (f, g))
    mismatch = _output_mismatch(a, b)
    if mismatch:
        return Equivalence(False, mismatch, seconds=time.perf_counter() - t0)
    commands, pairs = _side_by_side(a, b)
    if _equal(_loaded(commands, []), pairs):
        return Equivalence(True, "the two programs are the same term", seconds=time.perf_counter() - t0)
    try:
        sat = _attempt(commands, pairs, chosen, limits)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # egglog errors, and Rust panics (BaseException), e.g. a rule equating shapes
        return Equivalence(False, f"saturation failed: {e}", seconds=time.perf_counter() - t0)
    if not sat.stopped(Stop.GOAL_REACHED):
        return Equivalence(False, f"saturation stopped ({sat.stop_reason})", seconds=time.perf_counter() - t0)
    needed, sat = _needed(commands, pairs, chosen, limits, sat)
    steps = [Step(it.index, it.by_rule()) for it in sat.iterations]
    names = tuple(r.name for r in needed)
    return Equivalence(True, "", names, steps, time.perf_counter() - t0)


def _program(p: ProgramLike, example_args: Sequence[Any]) -> Program:
    if isinstance(p, Program):
        return p
    from eqsat.frontend.jax import from_jax

    return from_jax(p, *example_args)


def _output_mismatch(a: Program, b: Program) -> str:
    """Why the programs cannot be compared output by output ("" if they can); a ``ShapeError`` if
    they do not even take the same inputs."""
    if [v.type for v in a.inputs] != [v.type for v in b.inputs]:
        raise ShapeError(
            f"the programs take different inputs: ({', '.join(str(v.type) for v in a.inputs)}) and "
            f"({', '.join(str(v.type) for v in b.inputs)})"
        )
    if len(a.outputs) != len(b.outputs):
        return f"one program has {len(a.outputs)} outputs, the other {len(b.outputs)}"
    for i, (x, y) in enumerate(zip(a.outputs, b.outputs, strict=True)):
        if x.type != y.type:
            return f"output {i} is {x.type} in one program and {y.type} in the other"
    return ""


def _side_by_side(a: Program, b: Program) -> tuple[str, list[tuple[str, str]]]:
    """Both programs as one (``b`` reading ``a``'s inputs, its parameters kept apart), encoded; and
    the e-graph names of each pair of outputs that must be equal."""
    rename: dict[int, Value] = {id(x): y for x, y in zip(b.inputs, a.inputs, strict=True)}
    params = list(a.params)
    values = dict(a.param_values)
    for p in b.params:
        fresh = Value(p.type, f"other.{p.name}" if p.name else None)
        rename[id(p)] = fresh
        params.append(fresh)
        if p.name in b.param_values:
            values[fresh.name or ""] = b.param_values[p.name]
    ops = [
        Op(op.name, tuple(rename.get(id(v), v) for v in op.inputs), op.attrs, op.outputs, op.payload)
        for op in b.ops
    ]
    both = Program(
        list(a.inputs), params, [*a.ops, *ops], [*a.outputs, *(rename.get(id(v), v) for v in b.outputs)]
    )
    both.param_values = values
    enc = encode(both)
    n = len(a.outputs)
    return enc.commands, list(zip(enc.roots[:n], enc.roots[n:], strict=True))


def _equal(egraph: bindings.EGraph, pairs: list[tuple[str, str]]) -> bool:
    try:
        egraph.parse_and_run_program(app("check", *(equal(x, y) for x, y in pairs)))
    except Exception:  # egglog's check failed: not (yet) equal
        return False
    return True


def _loaded(commands: str, rules: list[Rule]) -> bindings.EGraph:
    egraph = fresh_egraph(rules)
    egraph.parse_and_run_program(commands)
    return egraph


def _attempt(
    commands: str, pairs: list[tuple[str, str]], rules: list[Rule], limits: Limits
) -> SaturationReport:
    """Saturate with ``rules`` until the pairs are equal or a limit."""
    start = functools.partial(_loaded, commands, rules)
    return saturate(start, limits, goal=lambda egraph: _equal(egraph, pairs))[1]


def _needed(
    commands: str, pairs: list[tuple[str, str]], rules: list[Rule], limits: Limits, sat: SaturationReport
) -> tuple[list[Rule], SaturationReport]:
    """The rules that matched, cut down one at a time while the rest still prove it: each rule left
    is needed. Returns them and the report of saturating with exactly them."""
    fired = sat.rules_fired()
    needed = [r for r in rules if r.name in fired]
    for rule in list(needed):
        trial = [r for r in needed if r is not rule]
        report = _attempt(commands, pairs, trial, limits)
        if report.stopped(Stop.GOAL_REACHED):
            needed, sat = trial, report
    return needed, sat
