"""Kernel timings: single ops compiled alone on this device and timed, kept on disk per backend and
device kind, so that each op signature is timed once per device, by any process.

A roofline believes XLA runs every kernel near the device's peak; it does not (XLA:CPU's dense conv
runs 10-100x below its rate at 1x1 and 2x2 maps, its depthwise conv 50-100x below the same work as
multiply-adds). A cost model reads a timing where this table has one, and times the alternatives that
could change its choice before extraction, within a budget (``Limits.kernel_seconds``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from eqsat.config import write_atomically
from eqsat.deadline import clock
from eqsat.devices import device_file
from eqsat.ir import Program, TensorType


class Call(NamedTuple):
    """One op applied to operands of these types: what a kernel timing is of."""

    op: str
    attrs: dict[str, Any]
    inputs: tuple[TensorType, ...]
    output: TensorType

    @property
    def key(self) -> str:
        """The text a timing is kept under."""
        types = [str(t) for t in self.inputs]
        return json.dumps([self.op, sorted(self.attrs.items()), types, str(self.output)])


def default_table() -> Path:
    """A file in ``eqsat.config.cache_dir`` per backend and device kind."""
    return device_file("kernels")


class KernelTimes:
    """Seconds per ``Call`` on this device, read from ``path`` and written back as calls are timed.
    ``repeats``: runs per timing after a warm-up run (fewer once a kernel has run ``enough_s``)."""

    def __init__(self, path: str | Path | None = None, repeats: int = 5, enough_s: float = 0.2) -> None:
        self.path = Path(path) if path else default_table()
        self.repeats, self.enough_s = repeats, enough_s
        self.table: dict[str, float] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, call: Call) -> float | None:
        return self.table.get(call.key)

    def fingerprint(self) -> str:
        """Changes whenever a timing is added."""
        return hashlib.sha256(json.dumps(sorted(self.table.items())).encode()).hexdigest()[:16]

    def time(self, calls: Iterable[Call], seconds: float) -> int:
        """Time the ``calls`` not yet known, in order, until ``seconds`` have passed; how many were
        timed. The table is saved after each, so an interrupted run keeps what it measured."""
        end = clock() + seconds
        timed = 0
        for call in calls:
            if clock() >= end:
                break
            if call.key not in self.table:
                self.table[call.key] = time_call(call, self.repeats, self.enough_s)
                write_atomically(self.path, json.dumps(self.table, indent=0))
                timed += 1
        return timed


def time_call(call: Call, repeats: int = 5, enough_s: float = 0.2) -> float:
    """The median seconds of ``call`` compiled alone (ahead of time: inside a trace, it still runs
    now) on random operands, over ``repeats`` runs after a warm-up, or fewer once ``enough_s`` passed."""
    from eqsat.lowering import lower
    from eqsat.numerics import random_array

    program = Program()
    values = [program.add_input(f"x{i}", t) for i, t in enumerate(call.inputs)]
    program.add_output(program.add_op(call.op, values, **call.attrs))
    rng = np.random.default_rng(0)
    args = [random_array(t, rng) for t in call.inputs]
    fn = jax.jit(lower(program)).lower(*args).compile()
    jax.block_until_ready(fn(*args))
    times: list[float] = []
    while len(times) < repeats and sum(times) < enough_s:
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def alternatives_first(groups: Sequence[Sequence[Call]], estimate: Any) -> list[Call]:
    """The calls of ``groups`` (alternatives for one value each) in the order worth timing: groups of
    at least two alternatives (where a timing can change the choice), the costliest by ``estimate``
    first, each group's calls together."""
    choices = [g for g in groups if len(g) > 1]
    choices.sort(key=lambda g: -max(estimate(c) for c in g))
    seen: set[str] = set()
    ordered = []
    for call in (c for g in choices for c in g):
        if call.key not in seen:
            seen.add(call.key)
            ordered.append(call)
    return ordered
