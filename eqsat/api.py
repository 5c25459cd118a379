"""The Python API: ``optimize`` a Program, get an ``OptimizeResult`` with the program, report and JAX fn."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any

import jax
import numpy as np

from eqsat import stored
from eqsat.cache import ProgramCache
from eqsat.cost import CostModel
from eqsat.egraph import Serialized
from eqsat.errors import ShapeError
from eqsat.ir import Program
from eqsat.options import CARRIED, Options
from eqsat.pipeline import Job, NotFound, optimized, span
from eqsat.progress import ProgressBar
from eqsat.report import Outcome
from eqsat.rules import Rule
from eqsat.saturate import Iteration, Limits, Stop
from eqsat.text import DYNAMIC
from eqsat.xla_flags import compiling_with
from eqsat.xla_flags import jit as jit_under


@dataclass
class OptimizeResult(Outcome):
    """The optimized ``program``, the ``original``, the ``report``, and ``fn``: the jitted program; the
    ``options`` it was optimized with (for its specializations) and its entry in the program cache."""

    options: Options | None = field(default=None, repr=False)
    cache_key: str | None = None

    def __repr__(self) -> str:
        """A summary (``str(result.program)`` and ``str(result.report)`` hold the whole)."""
        before, after = len(self.original.live_ops()), len(self.program.live_ops())
        report = self.report
        changed = "the input returned" if self.program is self.original else f"{before} -> {after} ops"
        chosen = f", compiled under {dict(report.compiler_options)}" if report.compiler_options else ""
        return (
            f"OptimizeResult({changed}{chosen}, cost ({report.cost_model}) {report.cost_before:.6g} -> "
            f"{report.cost_after:.6g}, stopped: {report.stop_reason}, cache: {report.cache or 'off'})"
        )

    @property
    def compiler_options(self) -> tuple[tuple[str, Any], ...]:
        """The compiler options the program runs under (``fn``, ``eqsat.jit``): those eqsat chose for
        it, measured faster (``report.compiler_options``), else those it was optimized under."""
        given = self.options.compiler_options if self.options else ()
        return self.report.compiler_options or given

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
        """The optimized program, jitted (under the compiler options it was optimized for). Called with
        inputs of other sizes of the original's dynamic dims, it runs ``specialized``'s program for them,
        found once per signature (as jax.jit traces once per signature); an input of the wrong rank,
        dtype or fixed size is a ShapeError naming it. Each signature is checked once: later calls cost a
        dictionary lookup before jax's dispatch."""
        from eqsat.lowering import lower

        by_signature: dict[tuple[Any, ...], Callable[..., Any]] = {}

        def fn(*args: Any) -> Any:
            key = tuple((np.shape(a), getattr(a, "dtype", type(a))) for a in args)
            runner = by_signature.get(key)
            if runner is None:
                chosen = self.specialized(*args)
                runner = by_signature[key] = jit_under(lower(chosen.program), chosen.compiler_options)
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
    kernel timed before extraction and the whole not measured (the stages up to ``accept``); None
    where it is not found there. Never cached: what ``optimize`` returns for ``program`` is its own
    optimization. Control-flow bodies are optimized at the new size as ``optimize`` would. A template
    a safety net cut short is carried nowhere: each size is then optimized itself."""
    if template.report.cut_short:
        return None
    carried = replace(options, limits=replace(options.limits, kernel_seconds=0.0))
    try:
        with compiling_with(options.compiler_options):
            outcome = optimized(program, Job.of(carried, template=template.program), span("bodies", "accept"))
    except NotFound:
        return None
    if outcome.report.cut_short or outcome.report.saturation.stopped(Stop.ERROR):
        return None  # a safety net or a failure, not the template, decided: optimize_with reports it
    sizes = ", ".join("x".join(map(str, v.type.shape)) or "scalar" for v in template.original.inputs)
    note = f"the program optimized at {sizes} carried to this size (eqsat.guided)"
    report = replace(
        outcome.report, note="; ".join(filter(None, [note, outcome.report.note])), extractor=CARRIED
    )
    return _finished(program, options, replace(outcome, report=report), None, "off")


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
    compiler_options: Mapping[str, Any] | None = None,
) -> OptimizeResult:
    """Saturate ``program`` with ``rules`` (all by default; or themes/names), extract the cheapest under
    ``cost`` and return it. Within ``limits``, the best program found so far is returned; if that is
    not cheaper than the input by at least ``eqsat.accept.MIN_GAIN``, the input is returned unchanged.
    With ``verify``, both programs run on random inputs and a difference raises
    ``eqsat.MiscompileError``. ``extractor``: ``greedy``, ``ilp`` (exact, HiGHS, warm-started from
    greedy, best found within ``limits.ilp_timeout_s``), ``auto`` (ILP up to
    ``eqsat.pipeline.ILP_MAX_NODES`` e-nodes), or ``egglog`` (egglog's own tree extraction, as a
    reference).
    ``progress``: by default a progress bar (a notebook widget, or text on a terminal's stderr) once
    saturation has run a second; False for none; or a function called with each ``Iteration``.
    ``cache``: reuse the result of an earlier process that optimized the same program the same way
    (see ``eqsat.cache``; default ``eqsat.config.enable_cache``); ``report.cache`` says what happened.
    ``measure``: where the predicted gain is within the cost model's measured error (``CostModel.error``),
    compile and time both programs on this device and keep the faster (``report.note`` says which).
    ``compiler_options``: ``jax.jit``'s, for XLA, under which the program will run (as
    ``eqsat.xla_flags.ONEDNN_CPU_OPTIONS``): kernels are timed, programs compared and checked, and the
    result cached under them, and ``fn`` compiles under them (see ``eqsat.xla_flags``). Where none are
    given and kernels may be timed, eqsat times the result under XLA's alternatives for the platform
    too (``eqsat.xla_flags.ALTERNATIVES``: on CPU, oneDNN's convs) and keeps the options it ran faster
    with (``compiler_options``; ``eqsat.config.choose_compiler_options`` turns this off).
    """
    options = Options.of(rules, cost, limits, verify, extractor, measure, compiler_options)
    return optimize_with(program, options, progress=progress, cache=cache)


def optimize_with(
    program: Program,
    options: Options,
    progress: bool | Callable[[Iteration], None] | None = False,
    cache: bool | None = None,
) -> OptimizeResult:
    """``optimize`` with its options given as one ``Options`` (as ``eqsat.jit`` and ``fn``'s
    specializations keep them); the result is built once, the options with it."""
    with compiling_with(options.compiler_options):
        key, status = stored.key(program, options, cache)
        outcome = stored.read(key, program) if key else None
        if outcome is None:
            bar = ProgressBar() if progress is None or progress is True else None
            callback = bar or (progress if callable(progress) else None)
            try:
                outcome = optimized(program, Job.of(options, callback))
            finally:
                if bar is not None:
                    bar.close()
            if key:  # under the timings it used: a later process that reads them hits
                key, status = stored.key(program, options, cache)
            status = stored.store(key, outcome, program) if key else status
        else:
            status = outcome.report.cache
        return _finished(program, options, outcome, key, status)


def cached_result(program: Program, options: Options) -> OptimizeResult | None:
    """What ``optimize_with(program, options)`` returns where the program cache holds it (a hit),
    else None: nothing is optimized."""
    with compiling_with(options.compiler_options):
        key, _ = stored.key(program, options, None)
        outcome = stored.read(key, program) if key else None
        return None if outcome is None else _finished(program, options, outcome, key, outcome.report.cache)


def _finished(
    program: Program, options: Options, outcome: Outcome, key: str | None, status: str
) -> OptimizeResult:
    """The result of optimizing ``program``: ``outcome``, checked where ``options`` ask, with its
    options and what the cache did (``status``; ``key``: its entry)."""
    timings = dict(outcome.report.timings)
    cached = key if status in ("hit", "stored") else None
    note = outcome.report.note
    if options.verify and not outcome.report.saturation.stopped(Stop.ERROR):
        store = ProgramCache()
        if status == "hit" and cached is not None and (store.get(cached) or {}).get("verified") is True:
            note = "; ".join(filter(None, [note, "verified when it was cached"]))
        else:
            from eqsat.verify import validate

            t = time.perf_counter()
            # called inside a trace (eqsat.jit's), the check runs now: the program as written under the
            # caller's compiler options, the optimized one under those it runs under
            chosen = outcome.report.compiler_options or None
            with jax.ensure_compile_time_eval(), compiling_with(options.compiler_options):
                fired = sorted(outcome.report.rules_fired)
                validate(program, outcome.program, rules_fired=fired, options=chosen)
            timings["verify"] = time.perf_counter() - t
            if cached is not None:  # a later hit of this entry needs no check
                store.annotate(cached, "verified", True)
    report = replace(outcome.report, cache=status, timings=timings, note=note)
    found = {f.name: getattr(outcome, f.name) for f in fields(Outcome)}
    found |= {"original": program, "report": report}
    return OptimizeResult(**found, options=options, cache_key=cached)
