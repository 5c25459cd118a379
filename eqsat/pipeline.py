"""The optimizer as named stages over one state.

``STAGES`` lists them in order: control-flow ``bodies``, ``repeats`` (a repeated block optimized once),
``unit_dims``, ``proposals``, ``load``, ``saturate``, ``kernels`` (timed before extraction),
``extract``, ``accept``, ``measure`` and ``compiler_options``. ``run`` runs them, or a slice of
them (``span``), over one ``State``: each stage is timed under its name (a stage that leaves the state
as it was is not recorded), and the time limit is checked before each stage it bounds. A stage that
decides the result early (a failure, the time limit) marks the state ``final`` and no stage runs after
it.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from eqsat.accept import cheaper, faster_as_measured, rests_on_timings, worth_measuring
from eqsat.config import config
from eqsat.control_flow import Cond, Loop
from eqsat.cost import CostModel
from eqsat.deadline import Deadline, TimeLimit
from eqsat.egraph import Encoding, Serialized, decode, encode, extract_with_egglog
from eqsat.extract import TIE_BREAK, Choice, alternatives, greedy_dag, greedy_tree, ilp, taken_together
from eqsat.guided import following
from eqsat.host_memory import give_back_freed
from eqsat.ir import Program, Value
from eqsat.ops import OPS
from eqsat.options import Options
from eqsat.repeats import Repeats, find_repeats
from eqsat.report import Outcome, Report
from eqsat.saturate import Iteration, Limits, SaturationReport, Stop, StopReason, fresh_egraph
from eqsat.saturate import saturate as saturated
from eqsat.speed import Verdict, compared_under, io_bytes, too_large
from eqsat.stacking import Alternative
from eqsat.unit_dims import drop_unit_dims
from eqsat.verify import disagreement_under
from eqsat.xla_flags import Alternative as OptionsAlternative
from eqsat.xla_flags import alternatives as option_alternatives
from eqsat.xla_flags import compiling_with

ILP_MAX_NODES = 5000  # auto: exact ILP extraction up to this many e-nodes
DAG_MAX_NODES = 1500  # greedy DAG extraction (quadratic) up to this many; greedy tree cost beyond


@dataclass(frozen=True)
class Job:
    """One optimization: its ``options``, where its progress goes, the deadline its time limit sets
    for all of it, and (``OptimizeResult.specialized``) the program whose choices extraction follows."""

    options: Options
    deadline: Deadline
    progress: Callable[[Iteration], None] | None = None
    template: Program | None = None

    @classmethod
    def of(
        cls,
        options: Options,
        progress: Callable[[Iteration], None] | None = None,
        template: Program | None = None,
    ) -> Job:
        """A job starting now: its deadline ``options.limits.timeout_s`` from now."""
        return cls(options, Deadline(options.limits.timeout_s), progress, template)


class NotFound(Exception):
    """A template has no counterpart in the e-graph (``carry`` optimizes the size itself)."""


@dataclass(frozen=True)
class State:
    """What the stages have made so far. ``input`` is what is returned where nothing cheaper is found
    (the program as given, its control-flow bodies optimized); ``program`` is what the next stage
    works on (a repeated block's copies side by side, without unit dims)."""

    job: Job
    input: Program
    program: Program
    timings: dict[str, float] = field(default_factory=dict)
    repeats: tuple[Repeats, list[list[Value]]] | None = None  # the repeats, the combined one's boundaries
    proposals: dict[str, Sequence[Alternative]] = field(default_factory=dict)
    encoding: Encoding | None = None
    load: Callable[..., Any] | None = None  # loads the encoding into a fresh e-graph, the rules installed
    egraph: Any = None
    saturation: SaturationReport | None = None
    graph: Serialized | None = None  # the saturated e-graph, kept for pictures, extracted or not
    constants: frozenset[str] = frozenset()  # its classes known at compile time
    kernels_timed: int = 0
    kernels_left: int = 0
    best: Program | None = None
    extractor: str = ""
    cost: float = math.nan  # of ``best``
    cut: tuple[str, ...] = ()  # what a safety net cut short
    notes: tuple[str, ...] = ()
    outcome: Outcome | None = None
    final: bool = False

    @classmethod
    def of(cls, program: Program, job: Job) -> State:
        return cls(job, program, program)

    @property
    def model(self) -> CostModel:
        return self.job.options.cost

    @property
    def limits(self) -> Limits:
        return self.job.options.limits


@dataclass(frozen=True)
class Stage:
    """A step of the optimizer: ``run`` takes the state and returns the one it leaves; ``bounded``:
    the time limit is checked before it."""

    name: str
    run: Callable[[State], State]
    bounded: bool = False


def bodies(s: State) -> State:
    """The bodies of control-flow ops (the branches of an ``if``) each optimized on its own, within
    what is left of the time limit."""

    def optimized_body(program: Program) -> Program:
        options = replace(
            s.job.options, limits=replace(s.limits, timeout_s=max(s.job.deadline.left(), 0.0)), measure=False
        )
        return optimized(program, Job.of(options)).program

    ops = [
        replace(op, payload=op.payload.map(optimized_body)) if isinstance(op.payload, Cond | Loop) else op
        for op in s.program.ops
    ]
    if all(new is old for new, old in zip(ops, s.program.ops, strict=True)):
        return s
    program = replace(s.program, ops=ops)
    return replace(s, input=program, program=program)


def repeats(s: State) -> State:
    """A block that repeats, optimized once: the prefix, one copy of the block and the suffix side by
    side in one program (not for a template: it is the whole program)."""
    found = find_repeats(s.program) if s.job.template is None else None
    if found is None or _proposals_across_segments(s.program, found, s.job.options):
        return s
    combined, boundaries = found.combined()
    return replace(s, program=combined, repeats=(found, boundaries))


def _proposals_across_segments(program: Program, repeats: Repeats, options: Options) -> bool:
    """Whether a program rule (``Rule.proposal``) proposes one alternative for values of several
    segments (a recurrent cell's input projections, one in each copy of its step): optimizing one
    copy of the block would not see it."""
    segment = {id(out): i for i, s in enumerate(repeats.segments) for op in s.ops for out in op.outputs}
    spans: dict[int, set[int]] = {}
    for rule in options.rules:
        for alternative in rule.proposal.propose(program) if rule.proposal else ():
            spans.setdefault(id(alternative.shared), set()).add(segment.get(id(alternative.value), -1))
    return any(len(s) > 1 for s in spans.values())


def unit_dims(s: State) -> State:
    """The program without dims of size 1 where they are not needed (``eqsat.unit_dims``)."""
    return replace(s, program=drop_unit_dims(s.program))


def proposals(s: State) -> State:
    """The alternatives the program rules (``Rule.proposal``) propose for the program."""
    found = {r.name: r.proposal.propose(s.program) for r in s.job.options.rules if r.proposal}
    return replace(s, proposals=found) if any(found.values()) else s


def load(s: State) -> State:
    """The program (and the proposed alternatives) encoded and loaded into an e-graph with the rules
    installed, the time limit checked between chunks."""
    enc = encode(s.program, alternatives=[a for found in s.proposals.values() for a in found])
    rules, deadline = s.job.options.rules, s.job.deadline

    def start(check: bool = True) -> Any:
        egraph = fresh_egraph(rules)
        for chunk in enc.chunks():
            if check:
                deadline.check("while the program loaded")
            egraph.parse_and_run_program(chunk)
        return egraph

    try:
        egraph = start()
    except (KeyboardInterrupt, SystemExit, TimeLimit):
        raise
    except BaseException as e:  # egglog errors, and Rust panics (BaseException)
        return _failed(s, e)
    return replace(s, encoding=enc, load=start, egraph=egraph)


def saturate(s: State) -> State:
    """The rules run on the loaded e-graph within the limits (``eqsat.saturate``)."""
    load = s.load
    assert load is not None
    loaded = [s.egraph]

    def start() -> Any:  # the e-graph loaded, then (to rebuild it as it was) loaded again
        return loaded.pop() if loaded else load()

    try:
        egraph, sat = saturated(start, s.limits, s.job.progress, deadline=s.job.deadline)
        graph = Serialized(egraph.serialize([]).to_json())
    except (KeyboardInterrupt, SystemExit, TimeLimit):
        raise
    except BaseException as e:  # egglog errors, and Rust panics, e.g. a rule equating shapes
        return _failed(s, e)
    sat = replace(sat, proposed={name: len(found) for name, found in s.proposals.items() if found})
    cut = s.cut
    if sat.stopped(Stop.TIME_LIMIT):
        cut += (
            f"saturation stopped at the time limit ({s.limits.timeout_s:g} s) after {len(sat.iterations)} "
            "iterations: rewrites past them were not searched",
        )
    return replace(s, egraph=egraph, saturation=sat, graph=graph, cut=cut)


def _failed(s: State, error: BaseException) -> State:
    """The input, where egglog failed (a warning too)."""
    note = f"saturation failed, the input is returned: {error}"
    warnings.warn(f"eqsat: {note}", RuntimeWarning, stacklevel=4)
    return _input_returned(s, SaturationReport(stop_reason=StopReason(Stop.ERROR)), note)


def _timed_out(s: State, passed: TimeLimit) -> State:
    """The input, where the time limit passed before a program could be extracted."""
    sat = s.saturation or SaturationReport(stop_reason=StopReason.time_limit(passed.seconds))
    return _input_returned(s, sat, f"{passed}: the input is returned", cut_short=str(passed))


def _input_returned(s: State, sat: SaturationReport, note: str, cut_short: str = "") -> State:
    """The final state whose outcome is the input, its report saying why."""
    cost = s.model.program_cost(s.input)
    report = Report(sat, s.model.name, cost, cost, s.timings, note, "none", cut_short=cut_short)
    return replace(s, outcome=Outcome(s.input, s.input, report), final=True)


def _chooses(s: State) -> bool:
    """Whether extraction chooses by the cost model (the program is not alone in its e-graph, and no
    template or egglog's own extraction decides)."""
    return s.job.template is None and s.job.options.extractor != "egglog" and not _alone(s)


def _alone(s: State) -> bool:
    """Whether the saturated e-graph is the program itself: no rule fired, and no two of its values
    were one term (hash-consing merges those: extraction computes it once)."""
    sat, program = s.saturation, s.program
    assert sat is not None
    values = len(program.inputs) + len(program.params) + sum(len(op.outputs) for op in program.live_ops())
    return bool(sat.iterations) and not sat.rules_fired() and sat.iterations[-1].classes == values


def may_time_kernels(limits: Limits) -> bool:
    """Whether kernels not yet timed on this device may be timed: a budget above 0, and not a
    reproducible build."""
    return limits.kernel_seconds > 0 and not config.reproducible


def may_choose_compiler_options(options: Options) -> bool:
    """Whether eqsat may choose compiler options for a program optimized with ``options``: the caller
    gave none, kernels may be timed, and ``eqsat.config.choose_compiler_options`` is on."""
    chosen = bool(options.compiler_options)
    return config.choose_compiler_options and not chosen and may_time_kernels(options.limits)


def kernels(s: State) -> State:
    """Time the kernels of the e-graph's alternatives the cost model would otherwise estimate, each once
    per device (recorded for every later run), within the safety net of ``limits.kernel_seconds`` (the
    time limit does not count this time; none where no timing is asked: a budget of 0, or
    ``eqsat.config.reproducible``). A kernel whose operands and result take far more than the program's
    arguments and results (``eqsat.speed.too_large``: the S x S scores of attention as written, at a
    length where the program is optimized to never hold them) is estimated, and a note says so."""
    if not _chooses(s):
        return s
    graph = s.graph
    assert graph is not None and s.encoding is not None
    s = replace(s, constants=graph.constant_classes(s.encoding, s.program.param_values))
    model, limits, deadline = s.model, s.limits, s.job.deadline
    if not may_time_kernels(limits) or not model.timed_ops:
        return s
    began = deadline.elapsed()
    decided = io_bytes(s.program)
    groups = alternatives(graph, model.timed_ops, s.constants)
    large = {c.key: c for g in groups for c in g if too_large(c.nbytes, decided)}
    chosen = [[c for c in g if c.key not in large] for g in groups]
    timed, left = model.time_kernels(chosen, limits.kernel_seconds)
    deadline.extend(deadline.elapsed() - began)  # measurement, not search: not the limit's
    notes, cut = s.notes, s.cut
    if large:
        largest = max(large.values(), key=lambda c: c.nbytes)
        why = too_large(largest.nbytes, decided, f"the largest, a {largest.op} of {largest.output}")
        notes += (f"{len(large)} kernels not timed for their memory ({why}): the cost model estimates them",)
    if left:
        cut += (
            f"{left} kernels were left untimed at the timing limit ({limits.kernel_seconds:g} s): "
            "the roofline estimated them",
        )
    return replace(s, kernels_timed=timed, kernels_left=left, notes=notes, cut=cut)


def extract(s: State) -> State:
    """The cheapest program the e-graph holds under the cost model (or the template's, or egglog's)."""
    assert s.graph is not None and s.encoding is not None
    model, options, program = s.model, s.job.options, s.program
    if _alone(s):  # nothing to choose
        return replace(s, best=program, extractor=options.extractor, cost=model.program_cost(program))
    if s.job.template is not None:
        choice = following(s.graph, s.encoding, program, s.job.template)
        if choice is None:
            raise NotFound
        best = decode(s.graph, s.encoding, choice, program)
        return replace(s, best=best, extractor=options.extractor, cost=model.program_cost(best))
    if options.extractor == "egglog":
        best = extract_with_egglog(s.egraph, s.encoding, program)
        return replace(s, best=best, extractor=options.extractor, cost=model.program_cost(best))
    # the ILP gets what is left of the time (at least a moment): optimize ends near the limit
    ilp_seconds = min(s.limits.ilp_timeout_s, max(s.job.deadline.left(), 0.05))
    candidates, ilp_timed_out = _candidates(s, ilp_seconds)
    costs = {k: model.program_cost(p) for k, p in candidates.items()}
    # cheapest, ties to fewer ops as inside the extractors (a fused op over the same kernels), then ILP's
    name = min(candidates, key=lambda k: (costs[k] + TIE_BREAK * len(candidates[k].live_ops()), k != "ilp"))
    cut = s.cut + (f"the ILP solver's time limit ({ilp_seconds:g} s) ended its search",) * ilp_timed_out
    return replace(s, best=candidates[name], extractor=name, cost=costs[name], cut=cut)


def _candidates(s: State, ilp_timeout_s: float) -> tuple[dict[str, Program], bool]:
    """The programs the extractors that apply find, by extractor, and whether the ILP solver's time
    limit (not its work bound) ended its search."""
    graph, enc, program, model, extractor = s.graph, s.encoding, s.program, s.model, s.job.options.extractor
    assert graph is not None and enc is not None
    greedy = greedy_dag if graph.num_nodes <= DAG_MAX_NODES else greedy_tree
    warm = greedy(graph, model, s.constants, s.job.deadline)
    s.job.deadline.check("during extraction")
    candidates = {"greedy": _with_groups_taken(graph, enc, warm, program, model)}
    if not (extractor == "ilp" or (extractor == "auto" and graph.num_nodes <= ILP_MAX_NODES)):
        return candidates, False
    roots = [graph.roots[r] for r in enc.roots]
    exact = ilp(graph, model, roots, s.constants, ilp_timeout_s, warm, s.limits.ilp_max_nodes)
    candidates["ilp"] = decode(graph, enc, exact, program)
    return candidates, exact.timed_out


def _with_groups_taken(
    graph: Serialized, enc: Encoding, choice: Choice, program: Program, model: CostModel
) -> Program:
    """The program ``choice`` extracts, with each group of alternatives (``Encoding.groups``) taken
    together where that is cheaper."""
    best = decode(graph, enc, choice, program)
    cost = model.program_cost(best)
    for shared, values in enc.groups:
        trial = taken_together(graph, choice, shared, values)
        if trial is not None:
            candidate = decode(graph, enc, trial, program)
            if (trial_cost := model.program_cost(candidate)) < cost:
                best, cost, choice = candidate, trial_cost, trial
    return best


def accept(s: State) -> State:
    """The outcome: the extracted program (every copy of a repeated block rewritten alike), or the
    input where it is not cheaper by at least ``MIN_GAIN``."""
    assert s.best is not None and s.saturation is not None and s.graph is not None and s.encoding is not None
    best, after, notes = s.best, s.cost, s.notes
    if s.repeats is not None:
        found, boundaries = s.repeats
        parts = found.split(best, boundaries)
        if parts is None:  # extraction tied one segment to another's values: optimize the whole program
            whole = run(
                replace(State.of(s.input, s.job), timings=s.timings),
                span("unit_dims", "extract"),
            )
            return whole if whole.final else accept(whole)
        best = found.stitch(parts)
        after = s.model.program_cost(best)
        block = found.segments[found.first]
        notes = (
            f"a block of {len(block.ops)} ops repeats {found.count} times: optimized once, every copy alike",
        )
        notes += s.notes
    before = s.model.program_cost(s.input)
    if not cheaper(after, before):  # the input, as the caller wrote it
        best, after = s.input, before
        notes += ("extraction found nothing cheaper; the input is returned",)
    report = Report(
        s.saturation,
        s.model.name,
        before,
        after,
        s.timings,
        "; ".join(notes),
        s.extractor,
        kernels_timed=s.kernels_timed,
        kernels_left=s.kernels_left,
        cut_short="; ".join(s.cut),
    )
    outputs = [s.graph.roots[r] for r in s.encoding.roots]
    reload = partial(s.load, check=False) if s.load is not None else None
    return replace(s, outcome=Outcome(best, s.input, report, s.graph, outputs, reload))


def measure(s: State) -> State:
    """The outcome checked by measurement on this device where the options ask (``measure``: a gain
    within the model's error), the model's error is unknown, or the choice rests on kernels timed
    alone: where the optimized program was not measured faster, the input with only its ops'
    formulations chosen (``formulations_alone``), where that was, else the input."""
    outcome, model, options = s.outcome, s.model, s.job.options
    assert outcome is not None
    asked = options.measure or math.isinf(model.error) or rests_on_timings(outcome, model, s.limits)
    if not (asked and worth_measuring(outcome, model, always=not options.measure)):
        return s
    checked = faster_as_measured(outcome)
    if checked.program is outcome.original and outcome.program is not outcome.original:
        checked = formulations_alone(s, checked)
    return replace(s, outcome=checked)


def formulations_alone(s: State, rejected: Outcome) -> Outcome:
    """Where the optimized program lost to the input as measured, the input optimized again by the
    rules that only compute an op another way (``Rule.formulation``: a conv's or a pool's algorithm,
    chosen by the kernels timed), then measured in turn: what the cost model chose around the ops (a
    layout, a product's epilogue) may have cost more than their formulations gained. ``rejected``
    where that finds nothing, is cut short, or is not measured faster either (its note then says so)."""
    options = s.job.options
    rules = tuple(r for r in options.rules if r.formulation)
    if not rules or len(rules) == len(options.rules):
        return rejected
    job = replace(s.job, options=replace(options, rules=rules), progress=None)
    # its stages' times added to this optimization's
    local = run(replace(State.of(s.input, job), timings=s.timings), span("bodies", "accept")).outcome
    if local is None or local.program is local.original or local.report.cut_short:
        return rejected
    checked = faster_as_measured(local)
    names = ", ".join(sorted(local.report.rules_fired))
    note = f"{rejected.report.note}; the formulations alone ({names}): {checked.report.note}"
    kept = rejected if checked.program is checked.original else checked
    return replace(kept, report=replace(kept.report, note=note))


def compiler_options(s: State) -> State:
    """Where eqsat may choose compiler options (``may_choose_compiler_options``): the outcome and its
    input compiled under each of ``eqsat.xla_flags.ALTERNATIVES`` for this platform that changes one
    of their kernels (on CPU, oneDNN's convs; an inexact alternative only where the rules admit an
    inexact rule), timed against the outcome under the options in force, and the fastest kept with
    its options (``Report.compiler_options``) where it won by a margin noise does not cross. Where
    one of them ran faster under the alternative at all, the input is also optimized again under it
    (``optimized_under``: its kernels timed under it, as they run there) and that program timed so
    too: the kernels were timed under the options in force, not under the alternative's."""
    import jax

    outcome, options = s.outcome, s.job.options
    assert outcome is not None
    if not may_choose_compiler_options(options):
        return s
    ops = {op.name for p in (outcome.program, outcome.original) for op in p.live_ops()}
    kinds = {OPS[name].contraction for name in ops if name in OPS}
    exact_asked = all(r.exact for r in options.rules)  # IEEE special values kept, as asked
    for alternative in option_alternatives(jax.default_backend()):
        if kinds & alternative.contractions and (alternative.exact or not exact_asked):
            outcome, chosen = _timed_under(s, outcome, alternative)
            if chosen:
                break
    return s if outcome is s.outcome else replace(s, outcome=outcome)


def _timed_under(s: State, outcome: Outcome, alternative: OptionsAlternative) -> tuple[Outcome, bool]:
    """``outcome`` with the fastest of its candidates under ``alternative`` kept to run under it, and
    True; or noted as not faster under it, and False."""
    candidates = list({id(p): p for p in (outcome.program, outcome.original)}.values())
    verdicts = compared_under(outcome.program, candidates, alternative.options)
    again = None
    if any(isinstance(v, Verdict) and v.after_s < v.before_s for v in verdicts):
        again = optimized_under(s, alternative)
    if again is not None:
        outcome = _counting(outcome, again)
        if str(again.program) in {str(p) for p in candidates}:  # nothing new to time
            outcome = _noted(outcome, f"optimized again for {alternative.name}'s options: no other program")
            again = None
        else:
            candidates.append(again.program)
            verdicts += compared_under(outcome.program, [again.program], alternative.options)
    faster = [
        (v, p) for v, p in zip(verdicts, candidates, strict=True) if isinstance(v, Verdict) and v.replaced
    ]
    if not faster:
        return _noted(outcome, f"under {alternative.name}'s options: {_said(verdicts[0])}"), False
    rejected = []
    for verdict, program in sorted(faster, key=lambda vp: vp[0].after_s / vp[0].before_s):
        found = again if again is not None and program is again.program else None  # optimized again
        which = _which(program, outcome, found, alternative)
        problem = disagreement_under(program, alternative.options)
        if problem is None:
            return _kept_under(outcome, program, found, which, verdict, alternative), True
        rejected.append(f"{which} disagreed with itself so ({problem})")
    return _noted(outcome, f"under {alternative.name}'s options: {'; '.join(rejected)}: not kept"), False


def _which(program: Program, outcome: Outcome, found: Outcome | None, alternative: OptionsAlternative) -> str:
    """Which candidate of ``_timed_under`` ``program`` is, in words (``found``: the optimization under
    ``alternative`` that found it, if one did)."""
    if found is not None:
        return f"the program optimized again for {alternative.name}'s options (its kernels timed under them)"
    return "the program as written" if program is outcome.original else "the optimized program"


def _kept_under(
    outcome: Outcome,
    program: Program,
    found: Outcome | None,
    which: str,
    verdict: Verdict,
    alternative: OptionsAlternative,
) -> Outcome:
    """``program`` (the outcome's, its input, or ``found``'s: optimized again) kept to run under
    ``alternative``'s options, with the report of the optimization that found it (counting both)."""
    base = outcome
    if found is not None:
        counted = {f: getattr(outcome.report, f) for f in ("kernels_timed", "kernels_left", "cut_short")}
        base = replace(found, report=replace(found.report, **counted))
    elif program is outcome.original:
        base = replace(outcome, report=replace(outcome.report, cost_after=outcome.report.cost_before))
    base = _noted(base, f"{which} compiled under {alternative.name}'s options ({_said(verdict)}): kept so")
    return replace(base, program=program, report=replace(base.report, compiler_options=alternative.options))


def optimized_under(s: State, alternative: OptionsAlternative) -> Outcome | None:
    """The input optimized again, with its own time limit, under ``alternative``'s options: its
    kernels timed, and its gain measured, compiled under them; None where the cost model's prices do
    not depend on the options (``CostModel.under_options_in_force``)."""
    with compiling_with(alternative.options):
        model = s.model.under_options_in_force()
        if model is None:
            return None
        options = replace(s.job.options, cost=model, compiler_options=alternative.options)
        job = Job.of(options, template=s.job.template)  # its own time limit, as any optimization
        # its stages' times added to this optimization's
        return run(replace(State.of(s.input, job), timings=s.timings), span("bodies", "measure")).outcome


def _counting(outcome: Outcome, again: Outcome) -> Outcome:
    """``outcome`` counting the kernels ``again`` timed and left, and cut short where ``again`` was:
    never cached then, so that the next optimization times what it left."""
    cut = again.report.cut_short and f"optimized again under other options: {again.report.cut_short}"
    report = replace(
        outcome.report,
        kernels_timed=outcome.report.kernels_timed + again.report.kernels_timed,
        kernels_left=outcome.report.kernels_left + again.report.kernels_left,
        cut_short=_joined(outcome.report.cut_short, cut),
    )
    return replace(outcome, report=report)


def _said(verdict: Verdict | str | None) -> str:
    """A verdict of ``compared_under`` in words, or why there is none."""
    if not isinstance(verdict, Verdict):
        return verdict or "not timed"
    return verdict.described(f"{verdict.after_s * 1e3:.3g} ms against {verdict.before_s * 1e3:.3g} ms")


def _noted(outcome: Outcome, note: str) -> Outcome:
    return replace(outcome, report=replace(outcome.report, note=_joined(outcome.report.note, note)))


def _joined(*notes: str) -> str:
    return "; ".join(filter(None, notes))


STAGES = (
    Stage("bodies", bodies),
    Stage("repeats", repeats),
    Stage("unit_dims", unit_dims),
    Stage("proposals", proposals),
    Stage("load", load, bounded=True),
    Stage("saturate", saturate, bounded=True),
    Stage("kernels", kernels, bounded=True),
    Stage("extract", extract, bounded=True),
    Stage("accept", accept),
    Stage("measure", measure),
    Stage("compiler_options", compiler_options),
)


def span(first: str, last: str) -> tuple[Stage, ...]:
    """The stages from ``first`` to ``last``, both included: a partial pipeline."""
    names = [stage.name for stage in STAGES]
    return STAGES[names.index(first) : names.index(last) + 1]


def run(state: State, stages: Sequence[Stage] = STAGES) -> State:
    """``stages`` run in order over ``state``: each timed under its name in ``state.timings`` (where it
    changed the state; its own time, less that of stages it ran inside), the time limit checked
    before those it bounds, none after a ``final`` state."""
    for stage in stages:
        if state.final:
            break
        t, inner = time.perf_counter(), sum(state.timings.values())
        try:
            if stage.bounded:
                state.job.deadline.check(f"before {stage.name}")
            after = stage.run(state)
        except TimeLimit as e:
            after = _timed_out(state, e)
        if after is not state:
            own = time.perf_counter() - t - (sum(state.timings.values()) - inner)
            state.timings[stage.name] = state.timings.get(stage.name, 0.0) + own
        state = after
    return state


def optimized(program: Program, job: Job, stages: Sequence[Stage] = STAGES) -> Outcome:
    """``program`` run through ``stages`` (all by default, ending with an outcome). What they held (the
    e-graph, kernels timed) is given back to the system before the result runs."""
    outcome = run(State.of(program, job), stages).outcome
    give_back_freed()
    assert outcome is not None, "a pipeline that ends before accept has no outcome"
    return outcome
