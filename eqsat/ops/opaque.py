"""The meanings of opaque ops by name: what eqsat runs for an op it does not optimize, and for the
lookups among them (embeddings), the kernel they run as."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from eqsat.ops import Kernel, Lowering
from eqsat.types import DTYPES, TensorType

OPAQUE_LOWERINGS: dict[str, Lowering] = {}
RESULT_TYPES = "result_types"


def _lookup(indices: int) -> Callable[[Sequence[TensorType], TensorType], Kernel]:
    """A lookup of rows by indices (operand ``indices``): it reads the indices and the rows it returns,
    not its whole table, and writes them."""

    def kernel(inputs: Sequence[TensorType], output: TensorType) -> Kernel:
        return Kernel(0.0, float(inputs[indices].nbytes + 2 * output.nbytes))

    return kernel


OPAQUE_KERNELS: dict[str, Callable[[Sequence[TensorType], TensorType], Kernel]] = {
    "gather": _lookup(1),  # JAX: table[ids], jnp.take (operand, indices)
    "dynamic_slice": _lookup(1),  # JAX: a window at run-time offsets (operand, *offsets)
    "pd_op.embedding": _lookup(0),  # Paddle: (ids, weight)
}
"""The kernel an opaque op runs as, by name, where reading all its operands would misprice it (the
cost models price other opaque ops as one pass over their operands and result)."""


def meaning_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """An opaque op's attributes as its meaning takes them: without ``op``, each dtype as JAX computes
    in it (int64 is int32 without jax_enable_x64: JAX would truncate it anyway, warning from eqsat's
    code)."""
    return {
        k: jax.dtypes.canonicalize_dtype(v) if k.endswith("dtype") and v in DTYPES else v
        for k, v in attrs.items()
        if k != "op"
    }


def register_opaque(op_name: str, fn: Lowering) -> None:
    """Teach eqsat to run an op it does not optimize (e.g. ``pd.my_op``): ``fn(*inputs, **attrs)``.

    ``fn`` returns one array or a tuple of arrays (one per result). A function with a parameter named
    ``result_types`` also receives the op's result types (a tuple of ``TensorType``, as the file
    declares them, dynamic dims bound), e.g. to shape an output its inputs do not determine.
    """
    OPAQUE_LOWERINGS[op_name] = fn
