"""The bottom of the package: tensor types and dtypes, and the name of the opaque op. Everything else
imports from here; this module imports nothing of eqsat's but its errors and text form."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from eqsat.errors import ShapeError
from eqsat.text import format_tensor_type

DTYPES = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)
# JAX's typed PRNG keys (``key<fry>``) pass through opaque ops; no canonical op reads them.
KEY_DTYPE_PREFIX = "key<"
MAX_DIM = 2**40  # larger dims are typos or corrupt input, not programs


@functools.cache
def _itemsize(dtype: str) -> int:
    if is_key_dtype(dtype):
        return 8
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


def is_key_dtype(dtype: str) -> bool:
    return dtype.startswith(KEY_DTYPE_PREFIX)


@dataclass(frozen=True)
class TensorType:
    """A tensor's static shape and dtype (a numpy dtype name)."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES and not is_key_dtype(self.dtype):
            raise ShapeError(f"unsupported dtype {self.dtype!r} (supported: {', '.join(DTYPES)})")
        for d in self.shape:
            if isinstance(d, bool) or not isinstance(d, int | np.integer) or not 0 <= d <= MAX_DIM:
                raise ShapeError(f"bad dimension {d!r} in shape {self.shape}: dims are integers in 0..2**40")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(map(int, self.shape))

    @property
    def itemsize(self) -> int:
        return _itemsize(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def __str__(self) -> str:
        return format_tensor_type(self.shape, self.dtype)


FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
HALF_DTYPES = frozenset({"float16", "bfloat16"})
# The op no rule touches: a framework op eqsat does not know, kept with its name, attributes and types.
OPAQUE = "opaque"


def accumulation_dtype(dtype: str) -> str:
    """float32 for half precision, else ``dtype`` itself."""
    return "float32" if dtype in HALF_DTYPES else dtype
