"""Paddle 3's saved program (``model.json`` from ``save_inference_model``) -> the PIR reader's lines.

The JSON holds the same program as the PIR text, serialized: ops (``"#": "1.matmul"`` is
``pd_op.matmul``, ``"0.combine"`` is ``builtin.combine``, ``"p"`` a ``builtin.parameter``), typed
attributes (``"0.a_bool"``, ``"1.a_intarray"``, ...), value ids (``{"%": 7}``; id 0 is an absent
operand) and types (``"0.t_dtensor"``, ``"0.t_vec"``). Each op becomes the ``Line`` the text
form would give, so both forms load through one reader; ``line`` in errors is the op's position.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from eqsat.errors import ParseError
from eqsat.text import NULL_TYPE, NULL_VALUE, AttrValue, Line

_DIALECTS = {"0": "builtin", "1": "pd_op", "2": "cf", "3": "onednn_op"}
_TYPE_DTYPES = {
    "t_f16": "f16",
    "t_bf16": "bf16",
    "t_f32": "f32",
    "t_f64": "f64",
    "t_bool": "i1",
    "t_i8": "i8",
    "t_ui8": "ui8",
    "t_i16": "i16",
    "t_i32": "i32",
    "t_i64": "i64",
}


def _type(t: dict[str, Any]) -> str:
    kind = t["#"].split(".", 1)[-1]
    if kind == "NULL":
        return NULL_TYPE
    if kind == "t_vec":
        return "vec[" + ",".join(_type(x) for x in t["D"]) + "]"
    if kind != "t_dtensor":
        raise ValueError(f"unsupported type {t['#']}")
    dtype, shape = t["D"][0]["#"].split(".", 1)[-1], t["D"][1]
    if dtype not in _TYPE_DTYPES:
        raise ValueError(f"unsupported dtype {dtype}")
    return "tensor<" + "".join(f"{d}x" for d in shape) + _TYPE_DTYPES[dtype] + ">"


_NOT_FINITE = {"INF": float("inf"), "-INF": float("-inf"), "NaN": float("nan")}
"""How Paddle writes a float attribute JSON has no number for: ``{"#": "0.a_f64", "VD": "-INF"}``."""


def _attr(a: dict[str, Any]) -> Any:
    kind = a["#"].split(".", 1)[-1]
    data: Any = a.get("D", a.get("VD"))
    if kind == "a_array":
        return tuple(_attr(x) for x in data)
    if kind == "a_bool":
        return int(data)
    if kind in ("a_i32", "a_i64"):
        return int(data)
    if kind in ("a_f32", "a_f64"):
        return _NOT_FINITE[data] if data in _NOT_FINITE else float(data)
    if kind == "a_intarray":
        return tuple(int(d) for d in data)
    if kind in ("a_str", "a_dtype"):
        return str(data)
    return str(data)  # a_place and others no reader interprets


def _name(op: dict[str, Any]) -> str:
    tag = op["#"]
    if tag == "p":
        return "builtin.parameter"
    dialect, _, name = tag.partition(".")
    return f"{_DIALECTS.get(dialect, dialect)}.{name}"


def _line(number: int, op: dict[str, Any]) -> Line:
    name = _name(op)
    regions = tuple(_region(number, region) for region in op.get("regions", []))
    region_args = tuple(_region_args(region) for region in op.get("regions", []))
    outs = op.get("O", [])
    outs = outs if isinstance(outs, list) else [outs]
    if name == "builtin.parameter":  # A: (..., name); OA: (persistable, ...)
        attrs: dict[str, AttrValue] = {
            "parameter_name": str(op["A"][3]),
            "persistable": int(op.get("OA", [1])[0]),
        }
    else:
        attrs = {a["N"]: _attr(a["AT"]) for a in op.get("A", [])}
    return Line(
        number=number,
        results=tuple(f"%{o['%']}" for o in outs),
        name=name,
        operands=tuple(NULL_VALUE if i["%"] == 0 else f"%{i['%']}" for i in op.get("I", [])),
        attrs=attrs,
        in_types=(),
        out_types=tuple(_type(o["TT"]) for o in outs),
        regions=regions,
        region_args=region_args,
    )


def _region(number: int, region: dict[str, Any]) -> tuple[Line, ...]:
    """A region's lines (its one block), numbered as the op that holds it."""
    (block,) = region["blocks"]
    return tuple(_line(number, op) for op in block["ops"])


def _region_args(region: dict[str, Any]) -> tuple[str, ...]:
    """The names of a region's block arguments (a loop's values: ``%-1``, ``%-2``...)."""
    (block,) = region["blocks"]
    return tuple(f"%{a['#']}" for a in block.get("args", []))


def json_lines(text: str) -> Iterator[Line]:
    """The ops of a Paddle 3 program saved as JSON, as reader lines (the first block of the program)."""
    try:
        data = json.loads(text)
        ops = data["program"]["regions"][0]["blocks"][0]["ops"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError) as e:
        raise ParseError(f"not a Paddle program saved as JSON ({type(e).__name__}: {e})") from None
    for number, op in enumerate(ops, start=1):
        try:
            yield _line(number, op)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise ParseError(
                f"malformed op ({type(e).__name__}: {e})", line=number, op=str(op)[:40]
            ) from None
