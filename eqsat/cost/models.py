"""Cost models: the cost of one op given its attributes and the types of its operands and result.

Extraction is DAG-aware: a program's cost is the sum over its distinct ops, so a shared subterm is
paid once. Write your own model by subclassing ``CostModel`` or passing a plain function with the
same signature as ``CostModel.op_cost``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax

from eqsat.devices import Device, calibrated_device, get_device
from eqsat.ir import Program, TensorType
from eqsat.ops import OPAQUE, OPS, Kernel, folds
from eqsat.ops.opaque import OPAQUE_KERNELS

from .kernels import Call, KernelTimes, alternatives_first


class CostModel:
    """Base class: ``op_cost(op, attrs, inputs, output)`` for a canonical op name or ``"opaque"``."""

    name = "custom"
    error = 0.0
    """How far the model's predicted gains stray from measured ones, as a fraction: the 75th
    percentile of |log(measured gain / predicted gain)| over every program of ``bench.cost_accuracy``
    (``gain_error`` of its ``all/<model>`` row in ``bench/cost_accuracy.json``, which a test holds the
    built-in models' values to). ``optimize(..., measure=True)`` times a gain smaller than this rather
    than trusting it. 0 (a model written elsewhere): never measured."""

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        raise NotImplementedError

    def fingerprint(self) -> str | None:
        """Text that changes whenever the model's costs may: optimized programs are cached under it.
        None (the default for a model written elsewhere) keeps its results out of the cache."""
        return None

    timed_ops: frozenset[str] = frozenset()
    """The ops whose calls the model times on this device before extraction (``time_kernels``) and
    prices at their timings (``call_cost``); none: the model times nothing before extraction."""

    def time_kernels(self, alternatives: Sequence[Sequence[Call]], seconds: float) -> tuple[int, int]:
        """Before extraction: time, within ``seconds``, the calls of ``timed_ops`` among the e-graph's
        ``alternatives`` (one sequence per value) that the model would otherwise estimate; how many
        it timed, and how many it left untimed. The base model times none."""
        return 0, 0

    def under_options_in_force(self) -> CostModel | None:
        """This model for programs compiled under the compiler options now in force
        (``eqsat.xla_flags.compiling_with``) where its costs depend on them: one that times kernels on
        this device, timing them under those options into their own table. None (the base model): its
        costs do not depend on them."""
        return None

    def call_cost(self, call: Call) -> float:
        """The cost of ``call``, knowing which operands are known at compile time (``Call.constant``);
        a model that times no kernels prices it as ``op_cost`` does."""
        return self.op_cost(call.op, call.attrs, call.inputs, call.output)

    def program_cost(self, program: Program) -> float:
        """The DAG cost of a program: every live op once; ops XLA folds at compile time (weights
        packed, laid out or rescaled: see ``Serialized.constant_classes``) are free."""
        folded, constant = folded_ops(program)
        total = 0.0
        for op in program.live_ops():
            if id(op) not in folded:  # a timed kernel's cost depends on which operands are weights
                known = tuple(id(v) in constant for v in op.inputs)
                types = tuple(v.type for v in op.inputs)
                total += self.call_cost(Call(op.name, op.attrs, types, op.outputs[0].type, known))
        return total


def folded_ops(program: Program) -> tuple[set[int], set[int]]:
    """The ids of the ops XLA computes at compile time (``eqsat.ops.folds``), and of the values known
    then (parameters with values, and what those ops compute)."""
    constant = {id(p) for p in program.params if p.name in program.param_values}
    fulls: set[int] = set()
    folded: set[int] = set()
    for op in program.live_ops():
        ins = {id(v) for v in op.inputs}
        if op.name == "full":
            fulls.add(id(op.outputs[0]))
        elif folds(op.name, ins, constant, fulls):
            constant.add(id(op.outputs[0]))
            folded.add(id(op))
    return folded, constant


class NodeCount(CostModel):
    """Every op costs 1: the smallest program wins."""

    name = "nodes"
    error = 0.98

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        return 1.0

    def fingerprint(self) -> str | None:
        return self.name


def phases(
    op: str,
    attrs: dict[str, Any],
    inputs: Sequence[TensorType],
    output: TensorType,
    device: Device | None = None,
) -> list[Kernel]:
    """The phases of an op (``Kernel``: the flops and bytes of each kernel it runs as, see
    ``OpDef.cost_phases``); opaque ops: one, a pass over their operands and result or their own
    (``ops.opaque.OPAQUE_KERNELS``: lookups).
    On a ``device`` that runs the op on a fused kernel of its own (``Device.kernels``) where that
    kernel takes the call (``OpDef.device_kernel``), that kernel: the op's arithmetic, its operands
    read and its result written once, at the rate ``kernel:<op>:<dtype>``."""
    io = float(sum(t.nbytes for t in inputs) + output.nbytes)
    if op == OPAQUE:
        lookup = OPAQUE_KERNELS.get(str(attrs.get("op")))
        return [lookup(inputs, output) if lookup else Kernel(float(output.size), io)]
    definition = OPS[op]
    own = definition.cost_phases(inputs, output, attrs)
    if device is None or op not in device.kernels or not own or definition.device_kernel is None:
        return own
    if definition.device_kernel(inputs, output, attrs, device.platform) is None:
        return own
    return [Kernel(sum(k.flops for k in own), io, kind=f"kernel:{op}:{inputs[0].dtype}")]


class Flops(CostModel):
    """Arithmetic plus memory traffic over an op's phases: ``flops + bytes_weight·bytes + per_op`` each.

    View-like ops (reshape, full, expand, split) are fused away by XLA and cost nothing; ``per_op``
    breaks ties toward fewer phases.
    """

    name = "flops"
    error = 0.22

    def __init__(self, bytes_weight: float = 1.0, per_op: float = 1.0) -> None:
        self.bytes_weight = bytes_weight
        self.per_op = per_op

    def fingerprint(self) -> str | None:
        return f"{self.name} {self.bytes_weight!r} {self.per_op!r}"

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        return sum(
            k.flops + self.bytes_weight * k.bytes + self.per_op for k in phases(op, attrs, inputs, output)
        )


_BACKEND_DEVICE = {"cpu": "cpu", "gpu": "h100", "cuda": "h100", "tpu": "tpu-v5e"}
TIMED_OPS = frozenset(n for n, d in OPS.items() if d.timed)
"""The ops no roofline predicts (``OpDef.timed``: convs, pools, transposes, scans, top_k, sorts): timed
here."""


def this_device() -> Device:
    """The calibrated profile of JAX's default backend, else its built-in one (cpu, gpu -> h100, tpu
    -> tpu-v5e)."""
    return calibrated_device() or get_device(_BACKEND_DEVICE.get(jax.default_backend(), "cpu"))


def profile(device: str | Device | None) -> Device:
    """A profile by name (``eqsat.devices.get_device``), a ``Device`` as given, or None: this device's
    (``this_device``)."""
    if device is None:
        return this_device()
    return get_device(device) if isinstance(device, str) else device


def error_over(error: float, device: Device, here: bool) -> float:
    """A model's ``error`` over ``device``; unknown (infinite) where the profile is this device's
    (``here``) and was not measured (``Device.measured``): every program the model changes is then
    timed against the input."""
    return math.inf if here and not device.measured else error


class Roofline(CostModel):
    """Seconds on a device: each phase of an op (``eqsat.ops.Kernel``: one kernel it runs as) takes
    ``max(flops / peak, bytes / bandwidth) + launch`` (cache bandwidth for phases whose traffic fits in
    the last-level cache); with ``timings``, the ops of ``TIMED_OPS`` at their seconds timed here.

    A fused op (linear with its activation epilogue, fma, a flash-attention block step) is one phase,
    so its epilogue pays no extra round trip to memory; view ops are free.
    """

    error = 0.27

    def __init__(self, device: str | Device | None = None, timings: KernelTimes | None = None) -> None:
        """``device``: a profile name from ``eqsat.devices`` (``calibrated``: this backend's, measured
        by ``eqsat.calibrate``), a ``Device``, or None: this device (``this_device``), on any backend,
        with its kernel ``timings`` (``eqsat.cost.kernels``; default: the table on disk). A named or
        given profile is the roofline alone, unless ``timings`` are given."""
        here = device is None
        self.device = profile(device)
        self.error = error_over(self.error, self.device, here)
        self.name = f"roofline:{self.device.name}"
        self.timings = KernelTimes() if here and timings is None else timings
        self.timed_ops = TIMED_OPS if self.timings is not None else frozenset()
        self._known: dict[Any, float] = {}  # op costs by (op, attrs, types): layers repeat them

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        try:
            key: Any = (op, tuple(sorted(attrs.items())), tuple(inputs), output)
            return self._known[key]
        except TypeError:  # an attribute that cannot be a key
            key = None
        except KeyError:
            pass
        if op in self.timed_ops:  # operands taken for run-time values: see ``call_cost``
            return self.call_cost(Call(op, attrs, tuple(inputs), output))
        cost = self.estimate(op, attrs, inputs, output)
        if key is not None:
            self._known[key] = cost
        return cost

    def call_cost(self, call: Call) -> float:
        """For a timed op, its timing on this device where there is one; else the roofline's estimate."""
        if call.op not in self.timed_ops:
            return self.op_cost(call.op, call.attrs, call.inputs, call.output)
        timed = self.timings.get(call) if self.timings is not None else None
        return timed if timed is not None else self.estimate(call.op, call.attrs, call.inputs, call.output)

    def estimate(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        """The roofline's seconds, timings aside."""
        return sum(self.phase_seconds(k) for k in phases(op, attrs, inputs, output, self.device))

    def time_kernels(self, alternatives: Sequence[Sequence[Call]], seconds: float) -> tuple[int, int]:
        if self.timings is None:
            return 0, 0
        ordered = alternatives_first(alternatives, lambda c: self.estimate(c.op, c.attrs, c.inputs, c.output))
        timed = self.timings.time(ordered, seconds) if seconds > 0 else 0
        return timed, sum(self.timings.get(c) is None for c in ordered)

    def under_options_in_force(self) -> CostModel | None:
        """With timings, the same roofline over the table of the options in force; None where it
        times nothing or its table was given (``KernelTimes.for_options_in_force``)."""
        timings = self.timings.for_options_in_force() if self.timings is not None else None
        if timings is None:
            return None
        model = copy.copy(self)
        model.timings, model._known = timings, {}
        return model

    def fingerprint(self) -> str | None:
        """The device profile, and the table of timings (its file: one per device kind). Not the
        table's contents: a timing, once recorded, never changes, and an optimization that is cached
        timed every kernel its choice read (one that left some untimed is cut short, never stored),
        so another program's new timings cannot change its result."""
        timed = f" timed in {self.timings.path}" if self.timings is not None else ""
        return repr(self.device) + timed

    def phase_seconds(self, phase: Kernel) -> float:
        """The roofline's seconds of one phase."""
        d = self.device
        bandwidth = d.cache_bandwidth if phase.bytes <= d.cache_bytes else d.bandwidth
        step = d.loop_step_s if phase.loop_step else 0.0
        write = d.write_bandwidth(phase.kind) if phase.written else None
        extra = phase.written / write if write else 0.0
        return max(phase.flops / d.peak(phase.kind), phase.bytes / bandwidth) + extra + d.launch_s + step


class FunctionCost(CostModel):
    """Wrap a plain function ``fn(op, attrs, inputs, output) -> float`` as a cost model."""

    def __init__(self, fn: Callable[[str, dict[str, Any], Sequence[TensorType], TensorType], float]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", "custom")

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        return float(self.fn(op, attrs, inputs, output))
