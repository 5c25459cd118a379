"""Measured choice between programs: each compiled and timed on this device, on the same random inputs.

``optimize(..., measure=True)`` uses it where a cost model's predicted gain is within the model's
measured error (``CostModel.error``), and wherever the optimized program rests on kernels timed alone;
a differentiated ``eqsat.jit`` function times training steps (``training_steps``, see
``eqsat.gradient``). A timing decides only where it holds: the program as written is replaced only
where the other was measured faster by a margin this machine's run-to-run noise does not cross
(``Verdict``), and the verdict is recorded per device, so later runs make the same choice without
timing again (``Verdicts``; with ``eqsat.config.reproducible`` nothing new is timed).
``eqsat.calibrate`` times its kernels with ``per_call``. Samples are interleaved, and a long one is
followed by a wait while the memory it freed is given back, so no call pays for another's.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import jax
import numpy as np

from eqsat.config import config, write_atomically
from eqsat.devices import device_file
from eqsat.ir import Program, Value
from eqsat.numerics import random_array
from eqsat.types import FLOAT_DTYPES
from eqsat.xla_flags import CompilerOptions, as_flags
from eqsat.xla_flags import jit as jit_in_force

SAMPLE_S = 2e-3  # a sample is as many calls as take about this long
# The least gain a timing must show for a program to replace the one as written: run-to-run noise of
# interleaved minima on this project's 2-core CPU under load stayed within it
MIN_MARGIN = 0.05
# A measurement may take this many times the memory of what it decides (the program's arguments and
# results, or the optimized program), and always this much, never more than MACHINE_SHARE of the
# machine's memory: a program as written that does not fit is not run to learn that it is slower
FAR, LARGE_BYTES, MACHINE_SHARE = 8, 256 * 2**20, 1 / 8
# A sample this long may leave memory being released after its result is ready (see ``released``)
RELEASE_AFTER_S = 10e-3
RELEASE_QUIET_S = 5e-3  # released: resident memory has not fallen for this long
_STATM = "/proc/self/statm"


@dataclass(frozen=True)
class Verdict:
    """Seconds per call of the program as written and of the other, the margin the other had to beat
    (``MIN_MARGIN`` or the spread of the samples, the larger) and whether it did (``replaced``)."""

    before_s: float
    after_s: float
    margin: float
    replaced: bool
    recorded: bool = False  # read from the record of an earlier measurement, not timed now

    @classmethod
    def of(cls, before: Sequence[float], after: Sequence[float]) -> Verdict:
        """The verdict of interleaved samples of both programs: each judged by its fastest sample, the
        margin widened to the samples' own spread (median over minimum)."""
        spread = max(statistics.median(t) / min(t) - 1 for t in (before, after))
        margin = max(MIN_MARGIN, spread)
        fast_before, fast_after = min(before), min(after)
        return cls(fast_before, fast_after, margin, fast_after * (1 + margin) < fast_before)

    def __str__(self) -> str:
        return self.described(
            f"as written {self.before_s * 1e3:.3g} ms, optimized {self.after_s * 1e3:.3g} ms"
        )

    def described(self, times: str) -> str:
        """The verdict in words, its two times as ``times`` says them."""
        source = " (recorded)" if self.recorded else ""
        ratio = self.before_s / self.after_s
        return f"timed{source}: {times}, {ratio:.2f}x against a margin of {self.margin:.0%}"


class Verdicts:
    """The verdicts of timings on this device (``eqsat.config.cache_dir``, one file per backend and
    device kind), by what was compared: a comparison is timed once, by any process."""

    def __init__(self) -> None:
        self.path = device_file("verdicts", versioned=True)

    @staticmethod
    def key(kind: str, *texts: str) -> str:
        return hashlib.sha256("\0".join([kind, *texts]).encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, key: str) -> Verdict | None:
        table = self._read()
        data = table.get(key)
        try:
            return Verdict(**{**data, "recorded": True}) if isinstance(data, dict) else None
        except TypeError:  # written by another version
            return None

    def put(self, key: str, verdict: Verdict) -> None:
        table = self._read()
        table[key] = {k: v for k, v in asdict(verdict).items() if k != "recorded"}
        write_atomically(self.path, json.dumps(table, indent=0))

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def machine_bytes() -> int:
    """The memory programs run in: an accelerator's (its allocator's limit), else the machine's
    physical memory (what it has, not what is free now: a choice may not depend on the load)."""
    device = jax.devices()[0]
    limit = (device.memory_stats() or {}).get("bytes_limit") if device.platform != "cpu" else None
    return int(limit) if limit else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def compiled_bytes(compiled: Any) -> int:
    """The memory XLA's buffer assignment gives a compiled program: arguments, results, temporaries."""
    stats = compiled.memory_analysis()
    parts = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
    return sum(int(getattr(stats, part, 0) or 0) for part in parts)


def io_bytes(program: Program) -> int:
    """The bytes of a program's arguments (weights included) and results: what any program computing
    them holds."""
    return sum(v.type.nbytes for v in (*program.inputs, *program.params, *program.outputs))


def too_large(need: int, decided: int, what: str = "a measurement") -> str | None:
    """Why ``what``, which needs ``need`` bytes, is not run to decide for a program that needs
    ``decided`` (``FAR`` times that or ``LARGE_BYTES``, whichever is more, and at most ``MACHINE_SHARE``
    of the machine's memory); None where it may run."""
    limit = min(max(FAR * decided, LARGE_BYTES), int(machine_bytes() * MACHINE_SHARE))
    if need <= limit:
        return None
    return (
        f"{what} needs {need / 2**20:.0f} MiB, more than the {limit / 2**20:.0f} MiB a measurement may take"
    )


def judged[R](kind: str, texts: Sequence[str], measure: Callable[[], R]) -> Verdict | R | None:
    """The recorded verdict of comparing ``texts`` (``kind``: what is compared), else what
    ``measure()`` gives, recorded where it is a ``Verdict`` (anything else: why nothing was timed);
    None where nothing is recorded and ``eqsat.config.reproducible`` forbids timing."""
    verdicts = Verdicts()
    key = verdicts.key(kind, *texts)
    known = verdicts.get(key)
    if known is not None or config.reproducible:
        return known
    outcome = measure()
    if isinstance(outcome, Verdict):
        verdicts.put(key, outcome)
    return outcome


def sampled(
    thunks: Sequence[Callable[[], Any]], samples: int = 7, sample_s: float = SAMPLE_S, pause_s: float = 0.0
) -> list[list[float]]:
    """Seconds per call of each thunk in ``samples`` interleaved samples, after a warm-up call each; a
    sample is as many calls as take about ``sample_s``. Rounds alternate the thunks' order (first to
    last, then last to first), so that no thunk always runs right after the same one: a call timed
    after one that freed gigabytes is slower (causal attention at S = 16384 in bfloat16, on this
    2-core VM: a median 1.87 s after jax.jit's 8 GiB call, 1.67 s after itself), and a fixed order
    charged that to one side only. ``pause_s``: an untimed pause after each sample, for thunks of
    another runtime whose threads keep spinning after a call (Intel's OpenMP, for 200 ms)."""
    calls = []
    for thunk in thunks:
        jax.block_until_ready(thunk())
        seconds = one_call(thunk)
        calls.append(max(1, min(1000, math.ceil(sample_s / max(seconds, 1e-9)))))
        if seconds >= RELEASE_AFTER_S:
            released()
    times: list[list[float]] = [[] for _ in thunks]
    forward = list(range(len(thunks)))
    for sample in range(samples):
        for i in forward if sample % 2 == 0 else forward[::-1]:
            thunk = thunks[i]
            t = time.perf_counter()
            for _ in range(calls[i]):
                out = thunk()
            jax.block_until_ready(out)
            seconds = time.perf_counter() - t
            times[i].append(seconds / calls[i])
            if seconds >= RELEASE_AFTER_S:
                released()
            if pause_s:
                time.sleep(pause_s)
    return times


def released() -> None:
    """Wait, untimed, while this process's resident memory falls. XLA:CPU gives a call's large buffers
    back on another thread after its result is ready (jax.jit's 4 GiB of attention scores at S = 8192:
    0.29 s), so the next call timed would pay for them: on two cores, an attention call timed right
    after that one took 0.84-1.07 s, 0.57-0.60 s a second later. Linux only (elsewhere no wait)."""
    last = _resident_pages()
    quiet_since = time.perf_counter()
    while last is not None and time.perf_counter() - quiet_since < RELEASE_QUIET_S:
        time.sleep(RELEASE_QUIET_S / 5)
        now = _resident_pages()
        if now is not None and now < last:
            quiet_since = time.perf_counter()
        last = now


def _resident_pages() -> int | None:
    try:
        with open(_STATM) as statm:
            return int(statm.read().split()[1])
    except OSError:
        return None


def one_call(thunk: Callable[[], Any]) -> float:
    """Seconds of one call of ``thunk``, its result ready."""
    start = time.perf_counter()
    jax.block_until_ready(thunk())
    return time.perf_counter() - start


def per_call(
    thunks: Sequence[Callable[[], Any]],
    samples: int = 7,
    statistic: Callable[[list[float]], float] = min,
    sample_s: float = SAMPLE_S,
    pause_s: float = 0.0,
) -> list[float]:
    """Seconds per call of each thunk: ``statistic`` of ``samples`` interleaved samples (``sampled``)."""
    return [statistic(t) for t in sampled(thunks, samples, sample_s, pause_s)]


def arguments(program: Program) -> list[Value]:
    """What the lowered ``program`` takes: its inputs, then its unbound parameters."""
    return [*program.inputs, *(p for p in program.params if p.name not in program.param_values)]


def compared(written: Program, other: Program, samples: int = 9) -> Verdict | str | None:
    """Whether ``other`` runs faster than ``written`` (programs of one signature) on this device, by
    a margin noise does not cross: both compiled and timed on the same random inputs in interleaved
    samples, the verdict recorded (``judged``); or why they were not run (``too_large``: the program
    as written may need far more memory than ``other``)."""

    def measure() -> Verdict | str:
        timed = _timed([(written, None), (other, None)], samples)
        return timed if isinstance(timed, str) else Verdict.of(*timed)

    return judged("program", [str(written), str(other)], measure)


def compared_under(
    baseline: Program, candidates: Sequence[Program], options: CompilerOptions, samples: int = 9
) -> list[Verdict | str | None]:
    """Whether each of ``candidates`` (programs of ``baseline``'s signature), compiled under the
    compiler ``options``, runs faster than ``baseline`` under those in force, as ``compared`` judges:
    all timed in the same interleaved samples where one has no verdict recorded; each verdict
    recorded. A compilation the options make fail is a reason, not a verdict."""
    samples_of: list[list[float]] | str | None = None
    flags = " ".join(as_flags(options))

    def verdict(i: int) -> Callable[[], Verdict | str]:
        def measure() -> Verdict | str:
            nonlocal samples_of
            if samples_of is None:
                runs = [(baseline, None), *((c, options) for c in candidates)]
                try:
                    samples_of = _timed(runs, samples)
                except Exception as e:  # an option this XLA does not know, or a program it cannot compile
                    samples_of = f"compiling under {flags} failed: {type(e).__name__}: {e}"
            if isinstance(samples_of, str):
                return samples_of
            return Verdict.of(samples_of[0], samples_of[i + 1])

        return measure

    return [judged("options", [str(baseline), str(c), flags], verdict(i)) for i, c in enumerate(candidates)]


def _timed(runs: Sequence[tuple[Program, CompilerOptions | None]], samples: int) -> list[list[float]] | str:
    """Interleaved samples of each program compiled under its options (None: those in force), on the
    same random inputs, the first being the program as written; or why they were not run
    (``too_large``: the program as written may need far more memory than the others)."""
    from eqsat.lowering import lower

    args = random_arguments(arguments(runs[0][0]))
    compiled = [jit_in_force(lower(p), options).lower(*args).compile() for p, options in runs]
    need = [compiled_bytes(c) for c in compiled]
    why = too_large(
        max(need), min(need[1:]), f"the program as written ({need[0] / 2**20:.0f} MiB) or this one"
    )
    if why:
        return why
    return sampled([functools.partial(run, *args) for run in compiled], samples)


def training_steps(fns: Sequence[Callable[..., Any]], values: Sequence[Value]) -> tuple[list[Any], list[Any]]:
    """Each function of ``values`` (returning a tuple of arrays) as a compiled training step, the
    function then the gradient of its float outputs' sum (in float32) with respect to its float
    arguments; and random arguments for them."""
    wrt = tuple(i for i, v in enumerate(values) if v.type.dtype in FLOAT_DTYPES)

    def step(fn: Callable[..., Any]) -> Callable[..., Any]:
        def loss(*args: Any) -> Any:
            outs = [o for o in fn(*args) if jax.numpy.issubdtype(o.dtype, jax.numpy.floating)]
            return sum(jax.numpy.sum(o.astype(jax.numpy.float32)) for o in outs)

        return jax.value_and_grad(loss, argnums=wrt)

    args = random_arguments(values)
    return [jit_in_force(step(fn)).lower(*args).compile() for fn in fns], args


def random_arguments(values: Sequence[Value]) -> list[Any]:
    """Normal random data for ``values`` (seed 0): what the programs compared here run on."""
    rng = np.random.default_rng(0)
    return [random_array(v.type, rng) for v in values]


def median_seconds(fn: Callable[..., Any], *args: Any, samples: int = 5) -> float:
    """Median seconds per call of jitted ``fn(*args)``."""
    run = jit_in_force(fn)
    return per_call([lambda: run(*args)], samples, statistics.median, 5e-3)[0]
