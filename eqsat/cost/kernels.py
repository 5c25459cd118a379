"""Kernel timings: single ops compiled alone on this device and timed, kept on disk per backend and
device kind, so that each op signature is timed once per device, by any process.

A roofline believes XLA runs every kernel near the device's peak; it does not (XLA:CPU's dense conv
runs 6-30x slower than a product per tap at 1x1 and 2x2 maps, its depthwise conv 50-100x slower than
the same work as multiply-adds). A cost model reads a timing where this table has one, and times the
alternatives that could change its choice before extraction, each once per device (the table makes
the next run's choice the same), ``Limits.kernel_seconds`` a safety net.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from eqsat.config import write_atomically
from eqsat.deadline import clock
from eqsat.devices import device_file
from eqsat.ir import Program, TensorType
from eqsat.speed import LARGE_BYTES, per_call


class Call(NamedTuple):
    """One op applied to operands of these types, ``constant`` saying which are known at compile time
    (weights: XLA lays them out, or folds what is computed from them, once): what a kernel timing is
    of. XLA:CPU ran a 3x3 conv of 512 channels at 7x7 in 5.9 ms with its kernel an argument, 3.6 ms
    with it a constant."""

    op: str
    attrs: dict[str, Any]
    inputs: tuple[TensorType, ...]
    output: TensorType
    constant: tuple[bool, ...] = ()

    @property
    def key(self) -> str:
        """The text a timing is kept under."""
        types = [f"{t}{' constant' if c else ''}" for t, c in zip(self.inputs, self.known, strict=True)]
        return json.dumps([self.op, sorted(self.attrs.items()), types, str(self.output)])

    @property
    def nbytes(self) -> int:
        """The bytes a timing of it holds: its operands twice (drawn on the host, copied to the
        device) and its result."""
        return 2 * sum(t.nbytes for t in self.inputs) + self.output.nbytes

    @property
    def known(self) -> tuple[bool, ...]:
        """``constant``, one flag per operand."""
        return self.constant or (False,) * len(self.inputs)


def default_table() -> Path:
    """A file in ``eqsat.config.cache_dir`` per backend and device kind."""
    return device_file("kernels", versioned=True)


class KernelTimes:
    """Seconds per ``Call`` on this device, read from ``path`` and written back as calls are timed.
    ``repeats``, ``enough_s``: samples per timing, and how long one call runs for one call to be the
    timing (``run_seconds``); ``workers``: kernels compiled side by side (default: one per core)."""

    def __init__(
        self,
        path: str | Path | None = None,
        repeats: int = 5,
        enough_s: float = 0.2,
        workers: int | None = None,
    ) -> None:
        self.path = Path(path) if path else default_table()
        self.repeats, self.enough_s = repeats, enough_s
        self.workers = workers or os.cpu_count() or 1
        self.table: dict[str, float] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, call: Call) -> float | None:
        return self.table.get(call.key)

    def fingerprint(self) -> str:
        """Changes whenever a timing is added."""
        return hashlib.sha256(json.dumps(sorted(self.table.items())).encode()).hexdigest()[:16]

    def time(self, calls: Iterable[Call], seconds: float) -> int:
        """Time the ``calls`` not yet known, in order, while the next few fit in ``seconds`` (judged by
        the longest few so far); how many were timed. Each few (``workers``, as many as hold
        ``LARGE_BYTES`` together: a larger one alone) are compiled side by side, then timed in
        interleaved samples (``run_seconds``); a compilation still running when the time
        is up is left to finish on its own, unused. The table is saved after each few, so an
        interrupted run keeps what it measured."""
        end = clock() + seconds
        todo = list({c.key: c for c in calls if c.key not in self.table}.values())
        timed = 0
        longest = 0.0  # the longest a few took so far: the next is started only if it fits
        pool = ThreadPoolExecutor(self.workers)
        try:
            for few in _side_by_side(todo, self.workers, LARGE_BYTES):
                start = clock()
                if start + longest >= end:
                    break
                futures = [_submitted(pool, call) for call in few]
                left = max(end - clock(), 0.0)
                if len(wait(futures, timeout=left if math.isfinite(left) else None).done) < len(futures):
                    break
                kernels = [future.result() for future in futures]
                for call, seconds in zip(few, run_seconds(kernels, self.repeats, self.enough_s), strict=True):
                    self.table[call.key] = seconds
                timed += len(few)
                self._save({c.key: self.table[c.key] for c in few})
                longest = max(longest, clock() - start)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return timed

    def _save(self, new: dict[str, float]) -> None:
        """Add ``new`` timings to the file as it is now (another process may have added its own)."""
        on_disk = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.table = {**on_disk, **self.table}
        write_atomically(self.path, json.dumps({**on_disk, **new}, indent=0))


def _side_by_side(calls: Sequence[Call], workers: int, budget: int) -> Iterator[list[Call]]:
    """``calls`` in order, in runs of at most ``workers`` whose operands and results together take at
    most ``budget`` bytes (a call larger than that alone): what is compiled and timed at once."""
    few: list[Call] = []
    for call in calls:
        if few and (len(few) == workers or sum(c.nbytes for c in few) + call.nbytes > budget):
            yield few
            few = []
        few.append(call)
    if few:
        yield few


def _submitted(pool: ThreadPoolExecutor, call: Call) -> Future[tuple[Callable[..., Any], list[Any]]]:
    """``compiled(call)`` in ``pool``; compiled now where no thread can start (the interpreter is
    shutting down, and ``eqsat.jit``'s background optimization finishes before it exits)."""
    try:
        return pool.submit(compiled, call)
    except RuntimeError:
        done: Future[tuple[Callable[..., Any], list[Any]]] = Future()
        done.set_result(compiled(call))
        return done


def compiled(call: Call) -> tuple[Callable[..., Any], list[Any]]:
    """``call`` alone, compiled ahead of time (inside a trace, it still runs when called), its constant
    operands random constants, and random values of the others."""
    from eqsat.lowering import lower
    from eqsat.numerics import random_array

    program = Program()
    rng = np.random.default_rng(0)
    values = [
        program.add_param(f"w{i}", t, random_array(t, rng)) if known else program.add_input(f"x{i}", t)
        for i, (t, known) in enumerate(zip(call.inputs, call.known, strict=True))
    ]
    program.add_output(program.add_op(call.op, values, **call.attrs))
    args = [random_array(v.type, rng) for v in program.inputs]
    return jax.jit(lower(program)).lower(*args).compile(), args


def run_seconds(
    kernels: Sequence[tuple[Callable[..., Any], Sequence[Any]]], repeats: int = 5, enough_s: float = 0.2
) -> list[float]:
    """Seconds per call of each ``fn(*args)``: the fastest of ``repeats`` samples taken in turn with the
    others' (``eqsat.speed.per_call``: a sample is as many calls as take a few milliseconds, as single
    calls of microseconds measure the timer; load slows a sample, never speeds it up); one call, after
    a warm-up, where a call takes ``enough_s`` or more."""
    thunks = [functools.partial(fn, *args) for fn, args in kernels]
    once = []
    for thunk in thunks:
        jax.block_until_ready(thunk())
        t0 = time.perf_counter()
        jax.block_until_ready(thunk())
        once.append(time.perf_counter() - t0)
    quick = [i for i, t in enumerate(once) if t < enough_s]
    for i, seconds in zip(quick, per_call([thunks[i] for i in quick], repeats), strict=True):
        once[i] = seconds
    return once


def alternatives_first(groups: Sequence[Sequence[Call]], estimate: Callable[[Call], float]) -> list[Call]:
    """The calls of ``groups`` (alternatives for one value each) in the order worth timing: groups of
    at least two alternatives (where a timing can change the choice), the costliest by ``estimate``
    first, each group's calls together; then the calls that have no alternative but are part of one
    (a transpose a layout switch takes), the costliest first."""
    choices = sorted((g for g in groups if len(g) > 1), key=lambda g: -max(estimate(c) for c in g))
    alone = sorted((g[0] for g in groups if len(g) == 1), key=lambda c: -estimate(c))
    return list({c.key: c for c in (*(c for g in choices for c in g), *alone)}.values())
