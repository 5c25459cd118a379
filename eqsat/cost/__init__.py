"""Cost models: what an op costs given its attributes and its operands' types. ``NodeCount``, ``Flops``,
``Roofline`` (device profiles in ``eqsat.devices``) in ``models``; ``XlaFusion`` (the roofline over the
kernels XLA fuses) in ``fusion``; ``Measured`` (every op timed on this device as it is asked about) in
``measured``; any function ``(op, attrs, inputs, output) -> float`` through ``FunctionCost``.

A kernel is what XLA compiles and launches. A timing is of a ``Call`` (one op on operands of given
types, compiled alone): ``KernelTimes`` in ``kernels`` is the one table of them on disk per device,
and the one way they are taken; ``Roofline()`` times its ``timed_ops`` before extraction
(``CostModel.time_kernels``), ``Measured`` every op while extraction asks. A roofline prices an op's
phases (``eqsat.ops.Kernel``: one kernel it runs as, by its flops and bytes); a device's own kernels
(``Device.kernels``) are the vendor kernels it runs an op on (cuDNN's attention).
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from .fusion import Fused, XlaFusion
from .kernels import KernelTimes
from .measured import Measured
from .models import CostModel, Flops, FunctionCost, NodeCount, Roofline, phases

__all__ = [
    "MODELS",
    "CostModel",
    "Flops",
    "FunctionCost",
    "Fused",
    "KernelTimes",
    "Measured",
    "NodeCount",
    "Roofline",
    "XlaFusion",
    "get_cost_model",
    "phases",
]


def this_roofline() -> CostModel:
    """The default model: on a CPU this device's roofline, its ``timed_ops`` timed here (``Roofline()``);
    on a GPU or TPU the roofline over the kernels XLA fuses there, timing no kernel (``XlaFusion()``:
    XLA:GPU and XLA:TPU fuse elementwise chains and epilogues)."""
    return Roofline() if jax.default_backend() == "cpu" else XlaFusion()


MODELS: dict[str, Callable[[], CostModel]] = {
    "nodes": NodeCount,
    "flops": Flops,
    "roofline": this_roofline,
    "measured": Measured,
    "xla": XlaFusion,
}


def get_cost_model(cost: str | CostModel | Callable[..., float]) -> CostModel:
    """A cost model from its name (``nodes``, ``flops``, ``roofline``, ``roofline:h100``, ``xla``,
    ``xla:h100``, ``measured``), an instance, or a function."""
    if isinstance(cost, CostModel):
        return cost
    if isinstance(cost, str) and cost.startswith(("roofline:", "xla:")):
        kind, device = cost.split(":", 1)
        return (Roofline if kind == "roofline" else XlaFusion)(device)
    if isinstance(cost, str):
        if cost not in MODELS:
            raise KeyError(f"unknown cost model {cost!r} (known: {', '.join(MODELS)})")
        return MODELS[cost]()
    if callable(cost):
        return FunctionCost(cost)
    raise TypeError(f"cost must be a model name, a CostModel or a function, got {type(cost).__name__}")
