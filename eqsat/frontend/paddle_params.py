"""Weights for loaded programs: Paddle's ``.pdiparams`` (read without Paddle), ``.npz`` files, dicts.

A ``.pdiparams`` file (``save_inference_model`` / ``save_combine``) holds the persistable tensors one
after another, in the order of their names, with no names in the file. Each tensor: a uint32 version,
a uint64 LoD level and that many LoD levels (a uint64 byte size and the offsets), a uint32 tensor
version, an int32 size and a protobuf ``TensorDesc`` (field 1: data type, field 2: dims), then the raw
little-endian data.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from eqsat.errors import ParseError
from eqsat.ir import Program

# Paddle's VarType data types (framework.proto) that tensors are saved in.
_DTYPES = {
    0: "bool",
    1: "int16",
    2: "int32",
    3: "int64",
    4: "float16",
    5: "float32",
    6: "float64",
    20: "uint8",
    21: "int8",
    22: "bfloat16",
}
Params = str | Path | Mapping[str, Any]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _tensor_desc(desc: bytes) -> tuple[str, list[int]]:
    """The data type and dims of a protobuf ``TensorDesc``."""
    i, dtype, dims = 0, None, []
    while i < len(desc):
        key, i = _varint(desc, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(desc, i)
            if field == 1:
                dtype = value
            elif field == 2:
                dims.append(value)
        elif wire == 2:  # packed dims
            size, i = _varint(desc, i)
            packed, j = desc[i : i + size], 0
            i += size
            while j < len(packed):
                value, j = _varint(packed, j)
                dims.append(value)
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
    if dtype not in _DTYPES:
        raise ValueError(f"unsupported Paddle data type {dtype}")
    return _DTYPES[dtype], [d - (1 << 64) if d >= 1 << 63 else d for d in dims]


def read_pdiparams(path: str | Path) -> list[np.ndarray]:
    """Every tensor of a ``.pdiparams`` file, in file order (the order of the parameters' names)."""
    data = Path(path).read_bytes()
    out, i = [], 0
    try:
        while i < len(data):
            _, lod_levels = struct.unpack_from("<IQ", data, i)
            i += 12
            for _ in range(lod_levels):
                (size,) = struct.unpack_from("<Q", data, i)
                i += 8 + size
            _, desc_size = struct.unpack_from("<Ii", data, i)
            i += 8
            dtype, dims = _tensor_desc(data[i : i + desc_size])
            i += desc_size
            if any(d < 0 for d in dims):
                raise ValueError(f"negative dims {dims}")
            np_dtype = np.dtype("uint16") if dtype == "bfloat16" else np.dtype(dtype)
            count = int(np.prod(dims, dtype=np.int64))
            if i + count * np_dtype.itemsize > len(data):
                raise ValueError("the file ends inside a tensor")
            array = np.frombuffer(data, np_dtype, count=count, offset=i).reshape(dims)
            if dtype == "bfloat16":
                import ml_dtypes

                array = array.view(ml_dtypes.bfloat16)
            out.append(array.copy())
            i += count * np_dtype.itemsize
    except (struct.error, ValueError) as e:
        raise ParseError(f"{path}: not a Paddle .pdiparams file ({e}, at byte {i})") from None
    return out


def bind_params(program: Program, params: Params) -> None:
    """Give the program's parameters their values: from a ``.pdiparams`` file (matched by sorted name,
    as Paddle saves them), an ``.npz`` file or a dict (by name; ``param_<name>`` keys also match)."""
    unbound = sorted(p.name for p in program.params if p.name and p.name not in program.param_values)
    if isinstance(params, str | Path) and str(params).endswith(".pdiparams"):
        arrays = read_pdiparams(params)
        if len(arrays) != len(unbound):
            raise ParseError(
                f"{params} holds {len(arrays)} tensors but the program has {len(unbound)} parameters "
                f"without values ({', '.join(unbound[:5])}{', ...' if len(unbound) > 5 else ''})"
            )
        values: Mapping[str, Any] = dict(zip(unbound, arrays, strict=True))
    elif isinstance(params, str | Path):
        with np.load(params) as npz:
            values = {k: npz[k] for k in npz.files}
    else:
        values = params
    types = {p.name: p.type for p in program.params}
    for name in unbound:
        value = values.get(name, values.get(f"param_{name}"))
        if value is None:
            continue
        array = np.asarray(value)
        want = types[name]
        if array.shape != want.shape or array.dtype.name != want.dtype:
            raise ParseError(
                f"parameter {name}: the program declares {want}, the weights are {array.dtype.name}"
                f"{list(array.shape)}"
            )
        program.param_values[name] = array
