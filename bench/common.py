"""Shared benchmark helpers: interleaved timing against plain jax.jit in one process, XLA's memory
accounting, JSON output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from eqsat import xla_flags
from eqsat.config import config
from eqsat.speed import compiled_bytes, per_call

OUT = Path(__file__).resolve().parent


def interleaved(
    fns: dict[str, Callable[[], Any]],
    repeats: int = 10,
    statistic: Callable[[list[float]], float] = statistics.median,
    sample_s: float = 2e-3,
    pause_s: float = 0.0,
) -> dict[str, float]:
    """Seconds per call of each thunk (median over ``repeats`` samples, or ``statistic``), samples
    interleaved (a, b, b, a, a, b, ...: rounds alternate their order) after one warm-up each
    (``eqsat.speed.per_call``; ``pause_s``: an untimed pause after each sample). A sample is one
    call, or for calls shorter than ``sample_s`` as many calls as take about that long (as
    ``timeit`` autoranges): single calls of tens of microseconds measure the timer and the scheduler
    more than the call."""
    return dict(zip(fns, per_call(list(fns.values()), repeats, statistic, sample_s, pause_s), strict=True))


def against_jax(times: dict[str, float]) -> dict[str, float]:
    """A row's timing columns from ``interleaved`` times of ``eqsat``, ``jax`` and ``jax_again``:
    both sides' seconds, eqsat's speedup, and jax.jit against itself (the noise)."""
    return {
        "eqsat_s": times["eqsat"],
        "jax_s": times["jax"],
        "speedup": times["jax"] / times["eqsat"],
        "noise": times["jax"] / times["jax_again"],
    }


MAX_ROUNDS = 10


def settled(optimize: Callable[[], Any]) -> tuple[Any, Any, list[int]]:
    """Optimize (``optimize()`` returns an ``OptimizeResult``) until an optimization times no new
    kernel, as later processes would with all the time they need (the program cache off: it would
    keep the first round's choice): the first result, the last, and how many kernels each timed."""
    cached, config.enable_cache = config.enable_cache, False
    try:
        first = last = optimize()
        timed = [first.report.kernels_timed]
        while timed[-1] and len(timed) < MAX_ROUNDS:
            last = optimize()
            timed.append(last.report.kernels_timed)
    finally:
        config.enable_cache = cached
    return first, last, timed


def settled_jit(make: Callable[[], Any], args: Sequence[Any]) -> tuple[Any, Any, list[int], Any]:
    """``settled`` for an ``eqsat.jit`` function ``make()`` builds afresh each time (a new process's
    first call), at ``args``: the first result, the last, how many kernels each timed, and the last
    function."""
    made: list[Any] = []

    def optimize() -> Any:
        made.append(make())
        return made[-1].result(*args)

    first, last, timed = settled(optimize)
    return first, last, timed, made[-1]


def run_cases(
    name: str,
    doc: str | None,
    cases: Sequence[str],
    measure: Callable[[str, int], dict[str, Any]],
    line: Callable[[dict[str, Any]], str],
    argv: list[str] | None = None,
) -> int:
    """A benchmark's command line: ``--repeats``, ``--only`` some of ``cases``; each measured, its
    ``line`` printed, the rows written to ``bench/<name>.json`` (with ``--only``, in place of those
    cases' rows there)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", nargs="*", choices=list(cases), help="these cases only")
    args = parser.parse_args(argv)
    rows = []
    for case in args.only or cases:
        rows.append(measure(case, args.repeats))
        print(line(rows[-1]), flush=True)
    if args.only:  # the other cases' rows of the last full run stay
        rows = merged_rows(OUT / f"{name}.json", rows, "model")
    print(f"wrote {write(name, {'repeats': args.repeats, 'rows': rows})}")
    return 0


def merged_rows(path: Path, rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The rows in ``path`` with ``rows`` in place of those of the same ``key``, new ones last."""
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    new = {r[key]: r for r in rows}
    return [new.pop(r[key], r) for r in old] + list(new.values())


def matmul_gflops(n: int = 2048, dtype: str = "float32", repeats: int = 5) -> float:
    """GFLOP/s of an n³ matmul of ``dtype`` under jax.jit (best run): the machine's practical peak, the
    ceiling any kernel made of products works under."""
    a = jax.numpy.asarray(np.random.default_rng(0).normal(size=(n, n)), dtype)
    square = jax.jit(jax.numpy.matmul)
    return 2 * n**3 / interleaved({"mm": lambda: square(a, a)}, repeats, statistic=min)["mm"] / 1e9


def peak_bytes(fn: Callable[..., Any], args: Sequence[Any]) -> int:
    """XLA's buffer assignment for one call: arguments + outputs + temporaries (a bound on peak use)."""
    return compiled_bytes(jax.jit(fn).lower(*args).compile())


def max_abs_diff(a: Any, b: Any) -> float:
    pairs = zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) for x, y in pairs)


def environment() -> dict[str, str]:
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0].device_kind),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_cores": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "xla_flags": " ".join(xla_flags.current()),
    }


def rerun_under(flags: Sequence[str], module: str, argv: Sequence[str] | None) -> None:
    """Unless this process runs under the XLA ``flags`` already, run ``python -m module`` with the same
    arguments (``argv``, or this process's) in a child process under them, and exit with its status:
    XLA reads its flags once, when JAX starts."""
    if set(flags) <= set(xla_flags.current()):
        return
    args = list(sys.argv[1:] if argv is None else argv)
    env = xla_flags.with_flags(flags)
    sys.exit(subprocess.run([sys.executable, "-m", module, *args], env=env).returncode)


def _cpu_model() -> str:
    """The CPU's model name (Linux), else the platform's processor string."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def write(name: str, results: dict[str, Any]) -> Path:
    path = OUT / f"{name}.json"
    path.write_text(json.dumps({"environment": environment(), **results}, indent=2) + "\n")
    return path
