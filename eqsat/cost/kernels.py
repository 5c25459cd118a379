"""Kernel timings: one op applied to operands of given types (a ``Call``), compiled alone on this device
and timed, kept on disk per backend and device kind, so that each call is timed once per device, by
any process and any cost model: the one table, the one way of timing.

A roofline believes XLA runs every kernel near the device's peak; it does not (XLA:CPU's dense conv
runs 6-30x slower than a product per tap at 1x1 and 2x2 maps, its depthwise conv 50-100x slower than
the same work as multiply-adds). ``Roofline()`` reads a timing where this table has one, and times the
alternatives that could change its choice before extraction, each once per device (the table makes
the next run's choice the same), ``Limits.kernel_seconds`` a safety net; ``Measured`` times each call
it is asked about, into the same table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from eqsat.config import write_atomically
from eqsat.deadline import clock
from eqsat.devices import device_file
from eqsat.host_memory import give_back_freed
from eqsat.ir import Program, TensorType
from eqsat.speed import LARGE_BYTES, one_call, per_call
from eqsat.xla_flags import in_force
from eqsat.xla_flags import jit as jit_under


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
        """Text equal for equal calls: what a timing is looked up by (never read back)."""
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

    def to_json(self) -> dict[str, Any]:
        """Plain data, each field its own: what the table on disk keeps."""
        return {
            "op": self.op,
            "attrs": self.attrs,
            "inputs": [_type_json(t) for t in self.inputs],
            "constant": list(self.known),
            "output": _type_json(self.output),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Call:
        """The call ``to_json`` wrote (its attributes' lists read back as tuples, as the IR has them)."""
        attrs = {name: _tuples(value) for name, value in data["attrs"].items()}
        inputs = tuple(TensorType(tuple(shape), dtype) for shape, dtype in data["inputs"])
        shape, dtype = data["output"]
        return cls(data["op"], attrs, inputs, TensorType(tuple(shape), dtype), tuple(data["constant"]))


def _type_json(t: TensorType) -> list[Any]:
    return [[int(d) for d in t.shape], t.dtype]


def _tuples(value: Any) -> Any:
    return tuple(map(_tuples, value)) if isinstance(value, list) else value


def default_table() -> Path:
    """A file in ``eqsat.config.cache_dir`` per backend and device kind."""
    return device_file("kernels", versioned=True)


class KernelTimes:
    """Seconds per ``Call`` on this device, read from ``path`` and written back as calls are timed.
    ``repeats``, ``enough_s``: samples per timing, and how long one call runs for one call to be the
    timing (``run_seconds``); ``workers``: kernels compiled side by side (default: one per core). Its
    calls are compiled under the compiler options in force where it is made (``eqsat.xla_flags``),
    those its table is kept for."""

    def __init__(
        self,
        path: str | Path | None = None,
        repeats: int = 5,
        enough_s: float = 0.2,
        workers: int | None = None,
    ) -> None:
        self.compiler_options = in_force()
        self.given = path is not None  # a table of the caller's, not the options' own
        self.path = Path(path) if path else default_table()
        self.repeats, self.enough_s = repeats, enough_s
        self.workers = workers or os.cpu_count() or 1
        self._timed = _read(self.path)

    def for_options_in_force(self) -> KernelTimes | None:
        """A table like this one for the compiler options now in force: their own default table (this
        one where they are this one's). None where this table was given a path: it keeps one set of
        options' timings."""
        if self.given:
            return None
        if in_force() == self.compiler_options:
            return self
        return KernelTimes(repeats=self.repeats, enough_s=self.enough_s, workers=self.workers)

    def __len__(self) -> int:
        return len(self._timed)

    def get(self, call: Call) -> float | None:
        """The seconds ``call`` took here, where it was timed."""
        found = self._timed.get(call.key)
        return found[1] if found else None

    def put(self, call: Call, seconds: float) -> None:
        """Record ``seconds`` for ``call`` here (the file gets it with the next timings ``time`` takes)."""
        self._timed[call.key] = (call, seconds)

    def of(self, op: str) -> list[tuple[Call, float]]:
        """Every timed call of ``op``, with its seconds."""
        return [(call, seconds) for call, seconds in self._timed.values() if call.op == op]

    def fingerprint(self) -> str:
        """Changes whenever a timing is added."""
        timed = sorted((key, seconds) for key, (_, seconds) in self._timed.items())
        return hashlib.sha256(json.dumps(timed).encode()).hexdigest()[:16]

    def time(self, calls: Iterable[Call], seconds: float) -> int:
        """Time the ``calls`` not yet known, in order, while the next few fit in ``seconds`` (judged by
        the longest few so far); how many were timed. Each few (``workers``, as many as hold
        ``LARGE_BYTES`` together: a larger one alone) are compiled side by side, then timed in
        interleaved samples (``run_seconds``), and what they held is given back to the system before
        the next few (``eqsat.host_memory.give_back_freed``). A compilation still running when the
        time is up is left to finish on its own, unused. The table is saved after each few, so an
        interrupted run keeps what it measured."""
        end = clock() + seconds
        todo = list({c.key: c for c in calls if c.key not in self._timed}.values())
        timed = 0
        longest = 0.0  # the longest a few took so far: the next is started only if it fits
        pool = ThreadPoolExecutor(self.workers)
        try:
            for few in _side_by_side(todo, self.workers, LARGE_BYTES):
                start = clock()
                if start + longest >= end:
                    break
                futures = [_submitted(pool, call, self.compiler_options) for call in few]
                left = max(end - clock(), 0.0)
                if len(wait(futures, timeout=left if math.isfinite(left) else None).done) < len(futures):
                    break
                seconds_each = run_seconds([f.result() for f in futures], self.repeats, self.enough_s)
                del futures  # the few's operands and programs: freed, and given back, before the next
                give_back_freed()
                for call, took in zip(few, seconds_each, strict=True):
                    self.put(call, took)
                timed += len(few)
                self._save({c.key: self._timed[c.key] for c in few})
                longest = max(longest, clock() - start)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return timed

    def _save(self, new: dict[str, tuple[Call, float]]) -> None:
        """Add ``new`` timings to the file as it is now (another process may have added its own)."""
        on_disk = _read(self.path)
        self._timed = {**on_disk, **self._timed}
        records = [{**call.to_json(), "seconds": s} for call, s in {**on_disk, **new}.values()]
        write_atomically(self.path, "[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n")


def _read(path: Path) -> dict[str, tuple[Call, float]]:
    """The timings in the file at ``path``, by ``Call.key``; none where there is no file, or where it
    holds a table in an earlier format (timings by text key: its calls are timed again)."""
    try:
        records = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    if not isinstance(records, list):
        return {}
    calls = [(Call.from_json(r), float(r["seconds"])) for r in records]
    return {call.key: (call, seconds) for call, seconds in calls}


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


def _submitted(
    pool: ThreadPoolExecutor, call: Call, options: dict[str, Any]
) -> Future[tuple[Callable[..., Any], list[Any]]]:
    """``compiled(call, options)`` in ``pool``; compiled now where no thread can start (the interpreter
    is shutting down, and ``eqsat.jit``'s background optimization finishes before it exits)."""
    try:
        return pool.submit(compiled, call, options)
    except RuntimeError:
        done: Future[tuple[Callable[..., Any], list[Any]]] = Future()
        done.set_result(compiled(call, options))
        return done


def compiled(call: Call, options: dict[str, Any]) -> tuple[Callable[..., Any], list[Any]]:
    """``call`` alone, compiled ahead of time under the compiler ``options`` (inside a trace, it still
    runs when called), its constant operands random constants, and random values of the others."""
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
    return jit_under(lower(program), options).lower(*args).compile(), args


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
        once.append(one_call(thunk))
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
