"""JAX meanings of Paddle ops that load as opaque (no canonical op says what they compute)."""

from __future__ import annotations

from typing import Any

import jax

from . import register_opaque


def _gelu(x: jax.Array, *, approximate: int = 0, **_: Any) -> jax.Array:
    """``pd_op.gelu``: the exact erf form unless ``approximate``."""
    return jax.nn.gelu(x, approximate=bool(approximate))


register_opaque("pd_op.gelu", _gelu)
register_opaque("pd.gelu", _gelu)
