"""Optimizations kept in the program cache (``eqsat.cache``): the key of one, storing its outcome, and
reading it back bound to the program's weights."""

from __future__ import annotations

import time

from eqsat.cache import ProgramCache, bind, optimization_key, uncacheable
from eqsat.config import config
from eqsat.egglog_text import REWRITES
from eqsat.ir import Program
from eqsat.options import Options
from eqsat.pipeline import may_choose_compiler_options, may_time_kernels
from eqsat.report import Outcome, Report
from eqsat.saturate import Stop
from eqsat.xla_flags import compiling_with
from eqsat.xla_flags import current as current_xla_flags


def key(program: Program, options: Options, cache: bool | None) -> tuple[str | None, str]:
    """The cache key of optimizing ``program`` under ``options``, or None and why it is not cached
    (``cache``: whether to use the cache; None: ``eqsat.config.enable_cache``)."""
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
    timing = "timed" if may_time_kernels(limits) else "untimed"
    timing += " options chosen" if may_choose_compiler_options(options) else ""
    with compiling_with(options.compiler_options):  # the flags the program compiles under, its own too
        flags = " ".join(current_xla_flags())
    parts = [*rules_text, fingerprint, limits.budget(), extractor, timing, flags]
    return optimization_key(program, parts), "stored"


def store(key: str, outcome: Outcome, program: Program) -> str:
    """Keep ``outcome`` of optimizing ``program`` under ``key``, unless optimization failed, a safety
    net cut it short, or its text does not read back; what the cache did."""
    if outcome.report.saturation.stopped(Stop.ERROR):
        return "not cached: optimization failed"
    if outcome.report.cut_short:  # the next process optimizes again, rather than keep a partial result
        return "not cached: cut short by a time limit"
    text = str(outcome.program)
    try:
        bind(text, program)
    except ValueError as e:
        return f"not cached: {e}"
    entry = {"program": text, "is_input": outcome.program is program, "report": outcome.report.to_json()}
    ProgramCache().put(key, entry)
    return "stored"


def read(key: str, program: Program) -> Outcome | None:
    """The outcome stored under ``key``, bound to ``program``'s weights; None if there is none usable."""
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
    return Outcome(best, program, report)
