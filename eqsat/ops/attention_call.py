"""``AttentionCall``: every attribute of one attention call, in one record. The ``attention`` and
``flash_attention`` ops' attributes (``ATTRS``) are its fields, in order; their lowerings, the flash
kernel (``eqsat.ops.flash``) and the backends' kernels (``eqsat.ops.attention_kernels``) take it whole."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, get_type_hints

from eqsat.text import AttrValue

from .base import ACCUMULATE, LIKE_ATTRIBUTE, Attr, AttrKind, like

_OP_DEFAULT = "op_default"  # a field's default as the op holds it, where it depends on the operands


@dataclass(frozen=True, kw_only=True)
class AttentionCall:
    """``softmax(where(mask and causal, cap(q kᵀ·scale / divisor) + bias, fill)) v``: q kᵀ rounded to
    ``product_dtype`` then ``scores_dtype``, soft-capped (``softcap · tanh(s / softcap)``) unless
    ``softcap`` is 0, the softmax in ``softmax_dtype`` (``shifted``: by its max); with ``zero_masked``
    the probabilities of masked keys are 0."""

    scale: float
    fill: float = -math.inf
    causal: bool = False
    zero_masked: bool = False
    divisor: float = 1.0
    scores_dtype: str = field(metadata={_OP_DEFAULT: ACCUMULATE})
    softmax_dtype: str = field(metadata={_OP_DEFAULT: ACCUMULATE})
    shifted: bool = True
    softcap: float = 0.0
    product_dtype: str = field(metadata={_OP_DEFAULT: like("scores_dtype")})

    @classmethod
    def of(cls, attrs: Mapping[str, AttrValue]) -> AttentionCall:
        """The call of an op's attributes (flags as ints; a missing one takes its default, an attribute
        that defaults to another's takes that one's value)."""
        values: dict[str, Any] = {k: _TYPES[k](v) if k in _TYPES else v for k, v in attrs.items()}
        for f in fields(cls):
            default = f.metadata.get(_OP_DEFAULT, "")
            if f.name not in values and default.startswith(LIKE_ATTRIBUTE):
                values[f.name] = values.get(default.removeprefix(LIKE_ATTRIBUTE))
        return cls(**values)

    @property
    def factor(self) -> float:
        """The scale with the divisor folded in: ``scale / divisor``."""
        return self.scale / self.divisor


_KINDS: dict[type, AttrKind] = {float: "float", bool: "int", str: "str"}


def _attr(f: Field[Any], kind: type) -> Attr:
    """The op attribute of one field: a flag is an int, 0 or 1."""
    default = f.metadata.get(_OP_DEFAULT, None if f.default is MISSING else f.default)
    if kind is bool:
        return Attr(f.name, "int", int(default), (0, 1))
    return Attr(f.name, _KINDS[kind], default)


_TYPES: dict[str, type] = get_type_hints(AttentionCall)  # each field's type (read once: it is slow)
ATTRS = tuple(_attr(f, _TYPES[f.name]) for f in fields(AttentionCall))
"""The attention ops' attributes: ``AttentionCall``'s fields."""
