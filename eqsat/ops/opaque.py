"""The meanings of opaque ops by name: what eqsat runs for an op it does not optimize."""

from __future__ import annotations

from eqsat.ops import Lowering

OPAQUE_LOWERINGS: dict[str, Lowering] = {}
RESULT_TYPES = "result_types"


def register_opaque(op_name: str, fn: Lowering) -> None:
    """Teach eqsat to run an op it does not optimize (e.g. ``pd.my_op``): ``fn(*inputs, **attrs)``.

    ``fn`` returns one array or a tuple of arrays (one per result). A function with a parameter named
    ``result_types`` also receives the op's result types (a tuple of ``TensorType``, as the file
    declares them, dynamic dims bound), e.g. to shape an output its inputs do not determine.
    """
    OPAQUE_LOWERINGS[op_name] = fn
