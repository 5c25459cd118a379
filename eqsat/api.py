"""The Python API: ``optimize`` a Program, get an ``OptimizeResult`` with the program, report and JAX fn."""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property, partial
from typing import Any

import jax
import numpy as np

from eqsat.cache import ProgramCache, bind, optimization_key, uncacheable
from eqsat.config import config
from eqsat.control_flow import Cond, Loop
from eqsat.cost import CostModel, get_cost_model
from eqsat.deadline import Deadline, TimeLimit
from eqsat.egglog_text import REWRITES
from eqsat.egraph import Encoding, Serialized, decode, encode, extract_with_egglog
from eqsat.errors import ShapeError
from eqsat.extract import TIE_BREAK, Choice, alternatives, greedy_dag, greedy_tree, ilp, taken_together
from eqsat.guided import following
from eqsat.ir import Program
from eqsat.layout import drop_unit_dims
from eqsat.ops import OPS
from eqsat.progress import ProgressBar
from eqsat.repeats import Repeats, find_repeats
from eqsat.rules import Rule, resolve
from eqsat.saturate import (
    Iteration,
    Limits,
    SaturationReport,
    Stop,
    StopReason,
    fresh_egraph,
    saturate,
)
from eqsat.speed import Verdict, compared, io_bytes, too_large
from eqsat.text import DYNAMIC

_STORED = ("cost_model", "cost_before", "cost_after", "note", "extractor")  # a cached report's fields
# A predicted gain below this fraction is below any cost model's resolution: the input is kept (the
# roofline priced Mirage's bfloat16 GQA with a shifted softmax 0.0008% below its own exp / sum, and
# it ran 0.87-0.93x)
MIN_GAIN = 1e-3


@dataclass
class Report:
    """What optimization did: saturation per iteration, rules fired, costs and where the time went."""

    saturation: SaturationReport
    cost_model: str
    cost_before: float
    cost_after: float
    timings: dict[str, float] = field(default_factory=dict)
    note: str = ""
    extractor: str = ""
    cache: str = ""  # "hit", "stored", "off", or why the result is not cached
    kernels_timed: int = 0  # kernels timed on this device before extraction (eqsat.cost.kernels)
    kernels_left: int = 0  # kernels of alternatives left untimed for lack of time: a later run times them
    cut_short: str = ""  # which wall-clock safety net cut the optimization short ("": none): never cached

    def to_json(self) -> dict[str, Any]:
        """What a cache entry keeps of this report (the timings are the process's own)."""
        saturation = asdict(self.saturation)
        del saturation["commands"]  # how this process's e-graph was made: the entry keeps no e-graph
        return {"saturation": saturation, **{k: getattr(self, k) for k in _STORED}}

    @classmethod
    def from_json(cls, data: dict[str, Any], timings: dict[str, float]) -> Report:
        """The report of a cache hit: ``to_json``'s data, this process's ``timings``."""
        sat = data["saturation"]
        stop = sat["stop_reason"]
        saturation = SaturationReport(
            [Iteration(**it) for it in sat["iterations"]],
            StopReason(Stop(stop["stop"]), stop["detail"]) if stop else None,
            sat["seconds"],
            sat.get("proposed", {}),
        )
        return cls(saturation, **{k: data[k] for k in _STORED}, timings=timings, cache="hit")

    @property
    def stop_reason(self) -> StopReason | None:
        return self.saturation.stop_reason

    @property
    def saturated(self) -> bool:
        return self.saturation.saturated

    @property
    def rules_fired(self) -> dict[str, int]:
        return self.saturation.rules_fired()

    def __repr__(self) -> str:
        """A summary (``str(report)`` has every line)."""
        return (
            f"Report(stopped: {self.stop_reason}, cost ({self.cost_model}) {self.cost_before:.6g} -> "
            f"{self.cost_after:.6g}, {len(self.rules_fired)} rules fired, cache: {self.cache or 'off'})"
        )

    def __str__(self) -> str:
        sat = self.saturation
        last = sat.iterations[-1] if sat.iterations else None
        lines = [
            f"saturation: {len(sat.iterations)} iterations, stopped: {sat.stop_reason}"
            + (f", {last.nodes} e-nodes in {last.classes} e-classes" if last else ""),
            f"cost ({self.cost_model}, {self.extractor} extraction): "
            f"{self.cost_before:.6g} -> {self.cost_after:.6g}",
            "rules fired: " + (", ".join(f"{k} x{v}" for k, v in sorted(self.rules_fired.items())) or "none"),
            "time: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.timings.items()),
        ]
        if self.cut_short:
            lines.append(f"cut short: {self.cut_short}")
        if self.note:
            lines.append(f"note: {self.note}")
        if self.cache:
            lines.append(f"cache: {self.cache}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Options:
    """How a program is optimized, beyond the program itself: what ``optimize`` was asked for, kept
    with its result (``OptimizeResult.fn`` optimizes other signatures so) and by ``eqsat.jit``."""

    rules: tuple[Rule, ...]
    cost: CostModel
    limits: Limits = field(default_factory=Limits)
    verify: bool = False
    extractor: str = "auto"
    measure: bool = False

    def __repr__(self) -> str:
        """A summary: the rules counted (``describe()`` lists them), the cost model named."""
        first = ", ".join(r.name for r in self.rules[:3]) + ", ..." * (len(self.rules) > 3)
        rules = f"<{len(self.rules)} rules: {first}>"
        return (
            f"Options(rules={rules}, cost={self.cost.name!r}, limits={self.limits!r}, verify={self.verify}, "
            f"extractor={self.extractor!r}, measure={self.measure})"
        )

    def describe(self) -> str:
        """Everything: the summary, then each rule's name and reason, one a line."""
        return "\n".join([repr(self), *(f"  {r.name}: {r.reason}" for r in self.rules)])

    def __post_init__(self) -> None:
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"unknown extractor {self.extractor!r} ({', '.join(EXTRACTORS)})")

    @classmethod
    def of(
        cls,
        rules: Iterable[Rule | str] | None = None,
        cost: str | CostModel | Callable[..., float] = "roofline",
        limits: Limits | None = None,
        verify: bool = False,
        extractor: str = "auto",
        measure: bool = False,
    ) -> Options:
        """Options from ``optimize``'s arguments: rules resolved, the cost model built."""
        model = get_cost_model(cost)
        return cls(tuple(resolve(rules)), model, limits or Limits(), verify, extractor, measure)


@dataclass
class OptimizeResult:
    """The optimized ``program``, the ``original``, the ``report``, and ``fn``: the jitted program."""

    program: Program
    original: Program
    report: Report
    egraph: Serialized | None = None
    outputs: list[str] = field(default_factory=list)  # the e-classes of the e-graph's outputs
    options: Options | None = field(default=None, repr=False)  # optimize's, for specializations
    cache_key: str | None = None  # the entry of the program cache that holds this result
    # loads the program into a fresh e-graph, the rules installed, as saturation began (for ``made_by``)
    reload: Callable[[], Any] | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        """A summary (``str(result.program)`` and ``str(result.report)`` hold the whole)."""
        before, after = len(self.original.live_ops()), len(self.program.live_ops())
        report = self.report
        changed = "the input returned" if self.program is self.original else f"{before} -> {after} ops"
        return (
            f"OptimizeResult({changed}, cost ({report.cost_model}) {report.cost_before:.6g} -> "
            f"{report.cost_after:.6g}, stopped: {report.stop_reason}, cache: {report.cache or 'off'})"
        )

    def show(
        self,
        what: str = "program",
        *,
        around: int | str | None = None,
        depth: int | str | None = "auto",
        interactive: bool = False,
        **caps: int | None,
    ) -> Any:
        """A picture (SVG, shown inline in notebooks): ``program`` (optimized), ``original``, ``egraph``.
        For the e-graph, ``around`` (an output's index or an e-class id) and ``depth`` choose a view,
        ``max_classes`` and ``max_nodes`` (e-nodes drawn per class) cap it (see
        ``eqsat.show.egraph_graph``). Without ``around`` the picture is of the outputs to depth 3 with
        3 e-nodes a class (readable at its size); ``depth=None, max_nodes=None`` draw all of it.
        ``interactive=True`` returns egglog's interactive viewer over the view instead (pan, zoom,
        filter; ``eqsat.show.explore``). A view or an option that does not exist, or an option of the
        e-graph's view given for a program, is an ``eqsat.show.ViewError`` (a ``ValueError``) naming
        what there is."""
        from eqsat.show import (
            DEFAULT_DEPTH,
            MAX_NODES,
            VIEWS,
            Picture,
            ViewError,
            egraph_graph,
            explore,
            program_graph,
        )

        if what not in VIEWS:
            raise ViewError(f"no view {what!r}: the views are {', '.join(VIEWS)}")
        unknown = [k for k in caps if k not in ("max_classes", "max_nodes")]
        if unknown:
            raise ViewError(
                f"no option {unknown[0]}=: the e-graph takes around=, depth=, max_classes=, max_nodes=, "
                "interactive="
            )
        if what != "egraph":
            chosen = {"around": around, "depth": None if depth == "auto" else depth, **caps}
            given = [k for k, v in chosen.items() if v is not None] + (["interactive"] if interactive else [])
            if given:
                raise ViewError(f"{given[0]}= chooses a view of the e-graph: show('egraph', {given[0]}=...)")
            return Picture(program_graph(self.program if what == "program" else self.original, what))
        if self.egraph is None:
            why = (
                " (it was loaded from the cache: optimize with cache=False)"
                if self.report.cache == "hit"
                else ""
            )
            raise ValueError(f"this result kept no e-graph{why}")
        if isinstance(around, int) and not 0 <= around < len(self.outputs):
            raise ViewError(f"around={around}: outputs are 0 to {len(self.outputs) - 1}, or name an e-class")
        start = [self.outputs[around]] if isinstance(around, int) else None if around is None else [around]
        if depth == "auto":
            depth = DEFAULT_DEPTH if around is None else None
        if interactive:
            if caps:
                raise ViewError(
                    f"{next(iter(caps))}= caps the static picture; the interactive view shows every "
                    "e-node of its view (choose it with around= and depth=)"
                )
            return explore(self.egraph, start, depth, self.made_by())  # type: ignore[arg-type]
        caps.setdefault("max_nodes", MAX_NODES if around is None else None)
        return Picture(egraph_graph(self.egraph, start, depth, **caps))  # type: ignore[arg-type]

    def made_by(self) -> dict[str, str]:
        """Where each e-node of ``egraph`` (by id) came from: ``loaded``, or the iteration that added it
        and the rule that did (``iteration 2: attention-fuse``; ``one of ...`` where several rules that
        fired in it write its op). egglog records no rule per e-node: the e-graph is rebuilt as it was
        after each iteration and compared, which costs about what saturation did. Empty where the
        result kept no e-graph."""
        from eqsat.saturate import states
        from eqsat.show import made_by

        if self.egraph is None or self.reload is None or self.options is None:
            return {}
        sat = self.report.saturation
        snapshots = (
            Serialized(e.serialize([]).to_json())
            for e in itertools.islice(states(self.reload, sat.commands), 1, None)
        )
        fired = [it.by_rule() for it in sat.iterations]
        return made_by(self.egraph, snapshots, fired, {r.name: r.constructs() for r in self.options.rules})

    @cached_property
    def fn(self) -> Callable[..., Any]:
        """The optimized program, jitted. Called with inputs of other sizes of the original's dynamic
        dims, it runs ``specialized``'s program for them, found once per signature (as jax.jit traces
        once per signature); an input of the wrong rank, dtype or fixed size is a ShapeError naming it.
        Each signature is checked once: later calls cost a dictionary lookup before jax's dispatch."""
        from eqsat.lowering import lower

        by_signature: dict[tuple[Any, ...], Callable[..., Any]] = {}

        def fn(*args: Any) -> Any:
            key = tuple((np.shape(a), getattr(a, "dtype", type(a))) for a in args)
            runner = by_signature.get(key)
            if runner is None:
                runner = by_signature[key] = jax.jit(lower(self.specialized(*args).program))
            return runner(*args)

        return fn

    @cached_property
    def _specializations(self) -> dict[tuple[tuple[int, ...], ...], OptimizeResult]:
        return {}

    def specialized(self, *args: Any) -> OptimizeResult:
        """The result for inputs shaped as ``args`` (arrays or ``jax.ShapeDtypeStruct``s), found once
        per shape: this one at the shapes it has. At other sizes of the original's dynamic dims, the
        program read again at them and optimized once for all sizes: this result's choices (or, where
        this one has a dynamic dim of 1, which its optimization drops, those made at 2) are carried
        to the new size, found in its saturated e-graph (``eqsat.guided``; no kernel timed, no
        program measured; the report's note says so); where they cannot be, it is optimized itself.
        An input of the wrong rank, dtype or fixed size is a ShapeError naming it."""
        shapes = _input_shapes(self.original, args)
        own = tuple(v.type.shape for v in self.original.inputs)
        if shapes == own:
            return self
        options = self.options or Options.of()
        # the sizes whose choices are carried: this result's, a dynamic dim of 1 taken at 2
        sizes = tuple(
            tuple(
                2 if d == DYNAMIC and n == 1 else n for d, n in zip(self.original.declared(v), s, strict=True)
            )
            for v, s in zip(self.original.inputs, own, strict=True)
        )
        template = self if sizes == own else self._at(sizes, lambda p: optimize_with(p, options))
        if shapes == sizes:
            return template
        return self._at(shapes, lambda p: carry(p, template, options) or optimize_with(p, options))

    def _at(
        self, shapes: tuple[tuple[int, ...], ...], optimized: Callable[[Program], OptimizeResult]
    ) -> OptimizeResult:
        """The result at ``shapes``, kept: the original read again at them, then ``optimized``."""
        known = self._specializations.get(shapes)
        if known is None:
            bound = {v.name: s for v, s in zip(self.original.inputs, shapes, strict=True) if v.name}
            assert self.original.specialize is not None  # _input_shapes checked the sizes otherwise
            known = self._specializations[shapes] = optimized(self.original.specialize(bound))
        return known


def carry(program: Program, template: OptimizeResult, options: Options) -> OptimizeResult | None:
    """``program`` (the template's original at other sizes of its dynamic dims) optimized as the
    template was: saturated, then the template's program found in its e-graph (``eqsat.guided``), no
    kernel timed and nothing measured; None where it is not found there. Never cached: what
    ``optimize`` returns for ``program`` is its own optimization. Control-flow bodies are optimized
    at the new size as ``optimize`` would, their kernels priced by the cost model, none timed. A
    template a safety net cut short is carried nowhere: each size is then optimized itself."""
    if template.report.cut_short:
        return None
    limits = replace(options.limits, kernel_seconds=0.0)
    deadline = Deadline(limits.timeout_s)
    job = _Job(options.rules, options.cost, limits, None, options.extractor, deadline, template.program)
    try:
        result = _optimized(program, job)
    except NotFound:
        return None
    if result.report.cut_short or result.report.saturation.stopped(Stop.ERROR):
        return None  # a safety net or a failure, not the template, decided: optimize_with reports it
    sizes = ", ".join("x".join(map(str, v.type.shape)) or "scalar" for v in template.original.inputs)
    note = f"the program optimized at {sizes} carried to this size (eqsat.guided): no kernel timed"
    report = replace(
        result.report, note="; ".join(filter(None, [note, result.report.note])), extractor=CARRIED
    )
    return _finished(program, options, replace(result, report=report), None, "off")


def _input_shapes(program: Program, args: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
    """The shapes of the arguments for ``program``'s inputs, checked: their rank and dtype, and the
    size of every dim that is not dynamic, must be the input's; and there must be one per input and per
    weight without a value."""
    free = [p for p in program.params if p.name not in program.param_values]  # weights passed in
    expected = [*program.inputs, *free]
    if len(args) != len(expected):
        names = ", ".join(repr(v.name) for v in expected)
        n = len(expected)
        raise TypeError(f"the program takes {n} argument{'s' * (n != 1)} ({names}), got {len(args)}")
    shapes = []
    for value, arg in zip(program.inputs, args, strict=False):  # the inputs, then the free weights
        kind = arg.dtype if hasattr(arg, "dtype") else np.result_type(arg)  # an array, or a Python number
        shape, dtype = tuple(np.shape(arg)), jax.dtypes.canonicalize_dtype(kind).name
        declared = program.declared(value)
        fits = len(shape) == len(declared) and all(
            d in (DYNAMIC, s) for d, s in zip(declared, shape, strict=True)
        )
        if not fits or dtype != jax.dtypes.canonicalize_dtype(value.type.dtype).name:
            want = "x".join("?" if d == DYNAMIC else str(d) for d in declared) or "scalar"
            raise ShapeError(
                f"input {value.name!r} must be {want} of {value.type.dtype}, got {shape} of {dtype}"
            )
        shapes.append(shape)
    return tuple(shapes)


EXTRACTORS = ("auto", "greedy", "ilp", "egglog")
CARRIED = "carried"  # the extractor of a result carried from another size (``OptimizeResult.specialized``)


def optimize(
    program: Program,
    rules: Iterable[Rule | str] | None = None,
    cost: str | CostModel | Callable[..., float] = "roofline",
    limits: Limits | None = None,
    progress: bool | Callable[[Iteration], None] | None = None,
    verify: bool = False,
    extractor: str = "auto",
    cache: bool | None = None,
    measure: bool = False,
) -> OptimizeResult:
    """Saturate ``program`` with ``rules`` (all by default; or themes/names), extract the cheapest under
    ``cost`` and return it. Within ``limits``, the best program found so far is returned; if that is
    not cheaper than the input by at least ``MIN_GAIN`` (0.1%), the input is returned unchanged.
    With ``verify``, both programs run on random inputs and a difference raises
    ``eqsat.MiscompileError``. ``extractor``: ``greedy``,
    ``ilp`` (exact, HiGHS, warm-started from greedy, best found within ``limits.ilp_timeout_s``),
    ``auto`` (ILP up to ``ILP_MAX_NODES`` e-nodes), or ``egglog`` (egglog's own tree extraction, as a
    reference).
    ``progress``: by default a progress bar (a notebook widget, or text on a terminal's stderr) once
    saturation has run a second; False for none; or a function called with each ``Iteration``.
    ``cache``: reuse the result of an earlier process that optimized the same program the same way
    (see ``eqsat.cache``; default ``eqsat.config.enable_cache``); ``report.cache`` says what happened.
    ``measure``: where the predicted gain is within the cost model's measured error (``CostModel.error``),
    compile and time both programs on this device and keep the faster (``report.note`` says which).
    """
    options = Options.of(rules, cost, limits, verify, extractor, measure)
    return optimize_with(program, options, progress=progress, cache=cache)


def optimize_with(
    program: Program,
    options: Options,
    progress: bool | Callable[[Iteration], None] | None = False,
    cache: bool | None = None,
) -> OptimizeResult:
    """``optimize`` with its options given as one ``Options`` (as ``eqsat.jit`` and ``fn``'s
    specializations keep them); the result is built once, the options with it."""
    model, limits = options.cost, options.limits
    key, status = _cache_key(program, options, cache)
    result = _cached(key, program) if key else None
    if result is None:
        bar = ProgressBar() if progress is None or progress is True else None
        callback = bar or (progress if callable(progress) else None)
        job = _Job(options.rules, model, limits, callback, options.extractor, Deadline(limits.timeout_s))
        try:
            result = _optimized(program, job)
        finally:
            if bar is not None:
                bar.close()
        # a model of no known error (an unmeasured profile of this device, ``Device.measured``) is
        # checked by measurement wherever it changed the program
        if options.measure or math.isinf(model.error) or _rests_on_timings(result, model, limits):
            result = _faster_as_measured(result, model, always=not options.measure)
        if key:  # under the timings it used: a later process that reads them hits
            key, status = _cache_key(program, options, cache)
        status = _store(key, result, program) if key else status
    else:
        status = result.report.cache
    return _finished(program, options, result, key, status)


def cached_result(program: Program, options: Options) -> OptimizeResult | None:
    """What ``optimize_with(program, options)`` returns where the program cache holds it (a hit),
    else None: nothing is optimized."""
    key, _ = _cache_key(program, options, None)
    result = _cached(key, program) if key else None
    return None if result is None else _finished(program, options, result, key, result.report.cache)


def _finished(
    program: Program, options: Options, result: OptimizeResult, key: str | None, status: str
) -> OptimizeResult:
    """``result`` of optimizing ``program``, checked where ``options`` ask, with its options and what
    the cache did (``status``; ``key``: its entry)."""
    timings = dict(result.report.timings)
    cached = key if status in ("hit", "stored") else None
    note = result.report.note
    if options.verify and not result.report.saturation.stopped(Stop.ERROR):
        store = ProgramCache()
        if status == "hit" and cached is not None and (store.get(cached) or {}).get("verified") is True:
            note = "; ".join(filter(None, [note, "verified when it was cached"]))
        else:
            from eqsat.verify import validate

            t = time.perf_counter()
            with jax.ensure_compile_time_eval():  # called inside a trace (eqsat.jit's), the check runs now
                validate(program, result.program, rules_fired=sorted(result.report.rules_fired))
            timings["verify"] = time.perf_counter() - t
            if cached is not None:  # a later hit of this entry needs no check
                store.annotate(cached, "verified", True)
    report = replace(result.report, cache=status, timings=timings, note=note)
    return replace(result, original=program, report=report, options=options, cache_key=cached)


@dataclass(frozen=True)
class _Job:
    """What one optimization was asked for, and the deadline its time limit sets for all of it."""

    rules: tuple[Rule, ...]
    model: CostModel
    limits: Limits
    progress: Callable[[Iteration], None] | None
    extractor: str
    deadline: Deadline
    template: Program | None = None  # extract the program that follows this one (``carry``)


class NotFound(Exception):
    """A carried template has no counterpart in the e-graph (``carry`` optimizes the size itself)."""


def _optimized(program: Program, job: _Job) -> OptimizeResult:
    """Saturate and extract: control-flow bodies each on their own, a repeated block once."""

    def body(program: Program) -> Program:
        limits = replace(job.limits, timeout_s=max(job.deadline.left(), 0.0))
        return optimize(
            program, job.rules, job.model, limits, False, extractor=job.extractor, cache=False
        ).program

    program = _with_bodies_optimized(program, body)
    repeats = find_repeats(program) if job.template is None else None  # a template is the whole program
    if repeats is not None and not _proposals_across_segments(program, repeats, job):
        return _optimize_repeats(repeats, job)
    return _optimize_whole(program, job)


def _proposals_across_segments(program: Program, repeats: Repeats, job: _Job) -> bool:
    """Whether a program rule (``Rule.proposal``) proposes one alternative for values of several
    segments (a recurrent cell's input projections, one in each copy of its step): optimizing one
    copy of the block would not see it."""
    segment = {id(out): i for i, s in enumerate(repeats.segments) for op in s.ops for out in op.outputs}
    spans: dict[int, set[int]] = {}
    for rule in job.rules:
        for alternative in rule.proposal.propose(program) if rule.proposal else ():
            spans.setdefault(id(alternative.shared), set()).add(segment.get(id(alternative.value), -1))
    return any(len(s) > 1 for s in spans.values())


def _rests_on_timings(result: OptimizeResult, model: CostModel, limits: Limits) -> bool:
    """Whether the extracted program runs a formulation of a timed kernel (``CostModel.timed_ops``: a
    conv's algorithm or layout) that the input does not: the kernels were
    timed alone, and alone they can mislead about the program they compose (ResNet-18 at 224x224,
    batch 1: each conv chosen ran faster alone, the program 0.85x)."""
    if not model.timed_ops or limits.kernel_seconds <= 0 or result.program is result.original:
        return False

    def formulations(program: Program) -> set[str]:
        return {
            f"{op.name} {sorted(op.attrs.items())} {[str(v.type) for v in op.inputs]}"
            for op in program.live_ops()
            if op.name in model.timed_ops and OPS[op.name].fusion_kind != "loop"  # a transpose fuses
        }

    return not formulations(result.program) <= formulations(result.original)


def _faster_as_measured(result: OptimizeResult, model: CostModel, always: bool = False) -> OptimizeResult:
    """``result``, or its input where the optimized program was not measured faster on this device by
    a margin noise does not cross (``eqsat.speed.compared``, recorded and reused): where the predicted
    gain is within ``model.error``, or ``always``. With ``eqsat.config.reproducible`` and no verdict
    recorded, the cost model's choice stands."""
    report = result.report
    uncertain = report.cost_before * math.exp(-model.error) < report.cost_after < report.cost_before
    if result.program is result.original or not (uncertain or always):
        return result
    t = time.perf_counter()
    verdict = compared(result.original, result.program)
    report.timings["measure"] = time.perf_counter() - t
    if not isinstance(verdict, Verdict):
        why = verdict or "no timing recorded (reproducible)"
        report.note = "; ".join(filter(None, [report.note, f"{why}: the cost model's choice is kept"]))
        return result
    predicted = f"predicted {report.cost_before / report.cost_after:.2f}x"
    kept = "the optimized program is kept" if verdict.replaced else "the input is returned"
    report.note = "; ".join(filter(None, [report.note, f"{predicted}, {verdict}: {kept}"]))
    if verdict.replaced:
        return result
    return replace(result, program=result.original, report=replace(report, cost_after=report.cost_before))


def _cache_key(program: Program, options: Options, cache: bool | None) -> tuple[str | None, str]:
    """The cache key of optimizing ``program`` under ``options``, or None and why it is not cached."""
    model, limits, rules = options.cost, options.limits, options.rules
    extractor = f"{options.extractor} measure={options.measure}"
    if not (config.enable_cache if cache is None else cache):
        return None, "off"
    fingerprint = model.fingerprint()
    why = uncacheable(program) or (
        None if fingerprint else f"the cost model {model.name!r} has no fingerprint"
    )
    if why or fingerprint is None:
        return None, f"not cached: {why}"
    rules_text = [f"{r.name} {r.exact}\n" + "\n".join([*r.prelude, *r.egglog(REWRITES)]) for r in rules]
    # where new kernels may not be timed, a choice can rest on estimates a timing run would replace
    timing = "timed" if _may_time_kernels(limits) else "untimed"
    return optimization_key(program, [*rules_text, fingerprint, limits.budget(), extractor, timing]), "stored"


def _store(key: str, result: OptimizeResult, program: Program) -> str:
    """Keep ``result`` of optimizing ``program`` under ``key``, unless optimization failed or its
    text does not read back."""
    if result.report.saturation.stopped(Stop.ERROR):
        return "not cached: optimization failed"
    if result.report.cut_short:  # the next process optimizes again, rather than keep a partial result
        return "not cached: cut short by a time limit"
    text = str(result.program)
    try:
        bind(text, program)
    except ValueError as e:
        return f"not cached: {e}"
    entry = {"program": text, "is_input": result.program is program, "report": result.report.to_json()}
    ProgramCache().put(key, entry)
    return "stored"


def _cached(key: str, program: Program) -> OptimizeResult | None:
    """The result stored under ``key``, bound to ``program``'s weights; None if there is none usable."""
    t = time.perf_counter()
    store = ProgramCache()
    entry = store.get(key)
    if entry is None:
        return None
    try:
        # the key holds the input's text: an entry that found nothing cheaper returns the input itself
        best = program if entry.get("is_input") is True else bind(entry["program"], program)
        report = Report.from_json(entry["report"], {})
    except (KeyError, TypeError, ValueError) as e:
        store.reject(key, str(e))
        return None
    report.timings["cache"] = time.perf_counter() - t
    return OptimizeResult(best, program, report)


def _with_bodies_optimized(program: Program, rewrite: Callable[[Program], Program]) -> Program:
    """``program`` with the bodies of its control-flow ops (the branches of an ``if``) each optimized on
    its own; the program itself if it has none (never changed in place: it stays the original)."""
    ops = [
        replace(op, payload=op.payload.map(rewrite)) if isinstance(op.payload, Cond | Loop) else op
        for op in program.ops
    ]
    if all(new is old for new, old in zip(ops, program.ops, strict=True)):
        return program
    return replace(program, ops=ops)


def _optimize_repeats(repeats: Repeats, job: _Job) -> OptimizeResult:
    """Optimize the prefix, one copy of the repeated block and the suffix side by side in one e-graph,
    and put the program back together with every copy of the block rewritten alike."""
    combined, boundaries = repeats.combined()
    result = _optimize_whole(combined, job)
    parts = repeats.split(result.program, boundaries)
    original = repeats.program
    if parts is None:  # extraction tied one segment to another's values: optimize the whole program
        return _optimize_whole(original, job)
    best = repeats.stitch(parts)
    model = job.model
    before, after = model.program_cost(original), model.program_cost(best)
    block = repeats.segments[repeats.first]
    note = f"a block of {len(block.ops)} ops repeats {repeats.count} times: optimized once, every copy alike"
    if result.report.note:  # e.g. why saturation returned its input
        note += f"; {result.report.note}"
    if not _cheaper(after, before):  # the input, as the caller wrote it
        best, after = original, before
        note += "; extraction found nothing cheaper, the input is returned"
    report = replace(result.report, cost_before=before, cost_after=after, note=note)
    return OptimizeResult(best, original, report, result.egraph, result.outputs)


def _optimize_whole(program: Program, job: _Job) -> OptimizeResult:
    """Saturate the whole program in one e-graph and extract from it, all before ``job.deadline``: a
    time limit that passes while the program loads or is extracted returns the input."""
    timings: dict[str, float] = {}
    model, limits, deadline = job.model, job.limits, job.deadline
    t = time.perf_counter()
    original, program = program, drop_unit_dims(program)
    proposals = {r.name: r.proposal.propose(program) for r in job.rules if r.proposal}
    enc = encode(program, alternatives=[a for found in proposals.values() for a in found])
    timings["encode"] = time.perf_counter() - t

    loads: list[float] = []  # seconds loading the program into egglog (again when replaying)

    def start(check: bool = True) -> Any:
        t0 = time.perf_counter()
        egraph = fresh_egraph(job.rules)
        for chunk in enc.chunks():
            if check:
                deadline.check("while the program loaded")
            egraph.parse_and_run_program(chunk)
        loads.append(time.perf_counter() - t0)
        return egraph

    try:
        egraph, sat = saturate(start, limits, job.progress, deadline=deadline)
    except (KeyboardInterrupt, SystemExit):
        raise
    except TimeLimit as e:
        return _timed_out(original, model, timings, e)
    except BaseException as e:  # egglog errors, and Rust panics (BaseException), e.g. a rule equating shapes
        return _unchanged(original, model, timings, f"saturation failed, the input is returned: {e}")
    timings["encode"] += loads[0]
    timings["saturate"] = sat.seconds - loads[0]
    sat = replace(sat, proposed={name: len(found) for name, found in proposals.items() if found})
    cut = []
    if sat.stopped(Stop.TIME_LIMIT):
        cut.append(
            f"saturation stopped at the time limit ({limits.timeout_s:g} s) after {len(sat.iterations)} "
            "iterations: rewrites past them were not searched"
        )
    t = time.perf_counter()
    timed = left = 0
    untimed = ""
    ilp_timed_out = False
    try:
        deadline.check("before extraction")
        graph = Serialized(egraph.serialize([]).to_json())  # kept for pictures, extracted or not
        if _holds_the_program_alone(sat, program):  # nothing to choose
            best, extractor, after = program, job.extractor, model.program_cost(program)
        elif job.template is not None:
            choice = following(graph, enc, program, job.template)
            if choice is None:
                raise NotFound
            best = decode(graph, enc, choice, program)
            extractor, after = job.extractor, model.program_cost(best)
        elif job.extractor == "egglog":
            best = extract_with_egglog(egraph, enc, program)
            extractor, after = job.extractor, model.program_cost(best)
        else:
            constants = graph.constant_classes(enc, program.param_values)
            timings["kernels"], timed, left, untimed = _time_kernels(graph, job, constants, program)
            # the ILP gets what is left of the time (at least a moment): optimize ends near the limit
            ilp_seconds = min(limits.ilp_timeout_s, max(deadline.left(), 0.05))
            best, extractor, after, ilp_timed_out = _extract(graph, enc, program, job, ilp_seconds, constants)
    except TimeLimit as e:
        timings["extract"] = time.perf_counter() - t
        return _timed_out(original, model, timings, e, sat)
    timings["extract"] = time.perf_counter() - t - timings.get("kernels", 0.0)
    if left:
        cut.append(
            f"{left} kernels were left untimed at the timing limit ({limits.kernel_seconds:g} s): "
            "the roofline estimated them"
        )
    if ilp_timed_out:
        cut.append(f"the ILP solver's time limit ({ilp_seconds:g} s) ended its search")
    result = _chosen(original, best, after, replace(job, extractor=extractor), sat, timings)
    note = "; ".join(filter(None, [untimed, result.report.note]))
    report = replace(
        result.report, kernels_timed=timed, kernels_left=left, cut_short="; ".join(cut), note=note
    )
    return replace(
        result,
        report=report,
        egraph=graph,
        outputs=[graph.roots[r] for r in enc.roots],
        reload=partial(start, check=False),
    )


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


def _may_time_kernels(limits: Limits) -> bool:
    """Whether kernels not yet timed on this device may be timed: a budget above 0, and not a
    reproducible build."""
    return limits.kernel_seconds > 0 and not config.reproducible


def _time_kernels(
    graph: Serialized, job: _Job, constants: frozenset[str], program: Program
) -> tuple[float, int, int, str]:
    """Time the kernels of the e-graph's alternatives the cost model would otherwise estimate, each once
    per device (recorded for every later run), within the safety net of ``limits.kernel_seconds`` (the
    time limit does not count this time): the seconds it took, how many it timed, how many it had no
    time for (none where no timing is asked: a budget of 0, or ``eqsat.config.reproducible``), and a
    note on those not timed for their memory: a kernel whose operands and result take far more than
    ``program``'s arguments and results (``eqsat.speed.too_large``: the S x S scores of attention as
    written, at a length where the program is optimized to never hold them) is estimated."""
    t = time.perf_counter()
    if not _may_time_kernels(job.limits) or not job.model.timed_ops:
        return 0.0, 0, 0, ""
    began = job.deadline.elapsed()
    decided = io_bytes(program)
    groups = alternatives(graph, job.model.timed_ops, constants)
    large = {c.key: c for g in groups for c in g if too_large(c.nbytes, decided)}
    chosen = [[c for c in g if c.key not in large] for g in groups]
    timed, left = job.model.time_kernels(chosen, job.limits.kernel_seconds)
    job.deadline.extend(job.deadline.elapsed() - began)  # measurement, not search: not the limit's
    note = ""
    if large:
        largest = max(large.values(), key=lambda c: c.nbytes)
        why = too_large(largest.nbytes, decided, f"the largest, a {largest.op} of {largest.output}")
        note = f"{len(large)} kernels not timed for their memory ({why}): the cost model estimates them"
    return time.perf_counter() - t, timed, left, note


def _chosen(
    original: Program,
    best: Program,
    after: float,
    job: _Job,
    sat: SaturationReport,
    timings: dict[str, float],
) -> OptimizeResult:
    """The result: ``best`` (of cost ``after``), or the input where it is not cheaper."""
    before = job.model.program_cost(original)
    note = ""
    if not _cheaper(after, before):  # the input, as the caller wrote it
        best, after, note = original, before, "extraction found nothing cheaper; the input is returned"
    report = Report(sat, job.model.name, before, after, timings, note, job.extractor)
    return OptimizeResult(best, original, report)


def _holds_the_program_alone(sat: SaturationReport, program: Program) -> bool:
    """Whether the saturated e-graph is the program itself: no rule fired, and no two of its values
    were one term (hash-consing merges those: extraction computes it once)."""
    values = len(program.inputs) + len(program.params) + sum(len(op.outputs) for op in program.live_ops())
    return bool(sat.iterations) and not sat.rules_fired() and sat.iterations[-1].classes == values


def _timed_out(
    program: Program,
    model: CostModel,
    timings: dict[str, float],
    passed: TimeLimit,
    saturation: SaturationReport | None = None,
) -> OptimizeResult:
    """The input, where the time limit passed before a program could be extracted."""
    cost = model.program_cost(program)
    sat = saturation or SaturationReport(stop_reason=StopReason.time_limit(passed.seconds))
    note = f"{passed}: the input is returned"
    report = Report(sat, model.name, cost, cost, timings, note, "none", cut_short=str(passed))
    return OptimizeResult(program, program, report)


def _cheaper(after: float, before: float) -> bool:
    """Whether cost ``after`` is below ``before`` by at least ``MIN_GAIN`` of it (costs of any sign)."""
    return after < before - MIN_GAIN * abs(before)


def _unchanged(program: Program, model: CostModel, timings: dict[str, float], note: str) -> OptimizeResult:
    """The input, with a report that says why nothing was done; a warning too."""
    warnings.warn(f"eqsat: {note}", RuntimeWarning, stacklevel=3)
    cost = model.program_cost(program)
    failed = SaturationReport(stop_reason=StopReason(Stop.ERROR))
    report = Report(failed, model.name, cost, cost, timings, note, "none")
    return OptimizeResult(program, program, report)


ILP_MAX_NODES = 5000  # auto: exact ILP extraction up to this many e-nodes
DAG_MAX_NODES = 1500  # greedy DAG extraction (quadratic) up to this many; greedy tree cost beyond


def _extract(
    graph: Serialized,
    enc: Encoding,
    program: Program,
    job: _Job,
    ilp_timeout_s: float,
    constants: frozenset[str],
) -> tuple[Program, str, float, bool]:
    """The cheapest program under the job's model among the extractors that apply, which one found it,
    its cost (``constants``: the classes known at compile time), and whether the ILP solver's time
    limit (not its work bound) ended its search."""
    model, extractor, deadline = job.model, job.extractor, job.deadline
    greedy = greedy_dag if graph.num_nodes <= DAG_MAX_NODES else greedy_tree
    warm = greedy(graph, model, constants, deadline)
    deadline.check("during extraction")
    candidates = {"greedy": _with_groups_taken(graph, enc, warm, program, model)}
    if extractor == "ilp" or (extractor == "auto" and graph.num_nodes <= ILP_MAX_NODES):
        roots = [graph.roots[r] for r in enc.roots]
        exact = ilp(graph, model, roots, constants, ilp_timeout_s, warm, job.limits.ilp_max_nodes)
        timed_out = exact.timed_out
        candidates["ilp"] = decode(graph, enc, exact, program)
    else:
        timed_out = False
    costs = {k: model.program_cost(p) for k, p in candidates.items()}
    # cheapest, ties to fewer ops as inside the extractors (a fused op over the same kernels), then ILP's
    name = min(candidates, key=lambda k: (costs[k] + TIE_BREAK * len(candidates[k].live_ops()), k != "ilp"))
    return candidates[name], name, costs[name], timed_out
