"""The line grammar shared by eqsat's text form and Paddle PIR dumps.

One op per line: ``(%r0, %r1) = "name" (%a, %b) {key:value, ...} : (in types) -> out types``.
This module splits such a line into its parts and parses attribute values and tensor types; what the
parts mean is up to the reader (``ir.parse_program`` or ``frontend.pir``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from eqsat.errors import ParseError

AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...]
NULL_VALUE = "<<NULL VALUE>>"  # PIR's absent optional operand
NULL_TYPE = "<<NULL TYPE>>"  # the type of an absent result (an optional output the op does not produce)
DYNAMIC = -1  # PIR's dynamic dimension
DYNAMIC_DEFAULT = 1  # the size a dynamic input dim takes where the user binds none

_LINE = re.compile(
    r"^\s*\((?P<results>[^)]*)\)\s*=\s*\"(?P<name>[^\"]+)\"\s*"
    r"\((?P<operands>[^)]*)\)\s*(?P<attrs>\{.*\})?\s*:\s*(?P<sig>.*)$"
)
_REGION_OP = re.compile(r"^\s*\([^)]*\)\s*=\s*\"(?P<name>[^\"]+)\".*\{\s*$")
# ``(%5) = "pd_op.if" (%4) {attrs} -> tensor<...>, ... {`` or ``(%7, %8) = "pd_op.while" (cond=%6,
# inputs=%5, %3) {``: an op whose regions follow (a while's first line names its block arguments:
# ``^%arg_0 {...}, %arg_1 {...}``)
_REGION_HEAD = re.compile(
    r"^\s*\((?P<results>[^)]*)\)\s*=\s*\"(?P<name>[^\"]+)\"\s*"
    r"\((?P<operands>[^)]*)\)\s*(?P<attrs>\{.*\})?\s*(?:->\s*(?P<outs>.*?))?\s*\{\s*$"
)
_KEYWORD = re.compile(r"\b\w+=")  # ``cond=`` and ``inputs=`` before a while's operands
_BLOCK_ARG = re.compile(r"(%[\w.]+)\s*\{[^}]*\}")
_IDENT = re.compile(r"^[A-Za-z_][\w.]*$")
_VALUE = re.compile(r"^%[\w.]+$")
_TENSOR = re.compile(r"^(?:\w+\.)?tensor<(?P<body>[^>]*)>$")
_DTYPES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "i1": "bool",
    "i8": "int8",
    "ui8": "uint8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "ui16": "uint16",
    "ui32": "uint32",
    "ui64": "uint64",
}
DTYPE_SHORT = {v: k for k, v in _DTYPES.items()}
_DTYPES |= {"u8": "uint8", "b": "bool"}  # Paddle 3's spellings, read but not written


@dataclass(frozen=True)
class Line:
    """The parts of one op line, before interpretation."""

    number: int
    results: tuple[str, ...]
    name: str
    operands: tuple[str, ...]
    attrs: dict[str, AttrValue]
    in_types: tuple[str, ...]
    out_types: tuple[str, ...]
    regions: tuple[tuple[Line, ...], ...] = ()  # a control-flow op's regions (``if``: then, else)
    region_args: tuple[tuple[str, ...], ...] = ()  # each region's block arguments (``while``: loop values)


_TOP_LEVEL = re.compile(r'"(?:[^"\\]|\\.)*"|[,()\[\]{}<>]')  # quoted strings are skipped whole
_CLOSING = {"(": ")", "[": "]", "{": "}", "<": ">"}


def split_top(text: str) -> list[str]:
    """Split on commas outside brackets (and quoted strings); empty input gives an empty list. Brackets
    that do not pair up are a ``ParseError``."""
    parts: list[str] = []
    start = 0
    open_: list[str] = []
    for m in _TOP_LEVEL.finditer(text):
        ch = m.group()
        if ch.startswith('"'):  # a quoted string: its commas and brackets are text
            continue
        if ch == ",":
            if not open_:
                parts.append(text[start : m.start()].strip())
                start = m.end()
        elif ch in _CLOSING:
            open_.append(_CLOSING[ch])
        elif not open_ or open_.pop() != ch:  # a closing bracket: it must close the last one opened
            raise ParseError(f"unbalanced {ch!r} in {text.strip()!r}")
    if open_:
        raise ParseError(f"a closing {open_[-1]!r} is missing in {text.strip()!r}")
    tail = text[start:].strip()
    if tail or parts:
        parts.append(tail)
    return parts


def parse_scalar(text: str) -> int | float | str:
    """An attribute scalar: int, float, bare word or quoted string."""
    text = text.strip()
    if text.startswith('"') and text.endswith('"') and len(text) >= 2:
        return text[1:-1].replace('\\"', '"')
    if text in ("true", "false"):
        return int(text == "true")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    return text


def parse_attr_value(text: str, line: int) -> AttrValue:
    """Parse ``array[1,2]``, ``IntArray[..]``, ``[..]``, numbers, words and ``Place(cpu)``."""
    text = text.strip()
    m = re.match(r"^(?:array|IntArray)?\[(.*)\]$", text)
    if m:
        items = [parse_scalar(t) for t in split_top(m.group(1))]
        if all(isinstance(i, int) for i in items):
            return tuple(items)  # type: ignore[return-value]
        if all(isinstance(i, int | float) for i in items):
            return tuple(float(i) for i in items)
        raise ParseError(f"bad attribute value {text!r}: arrays hold numbers only", line=line)
    if not text:
        raise ParseError("empty attribute value", line=line)
    return parse_scalar(text)


def parse_attrs(text: str | None, line: int) -> dict[str, AttrValue]:
    """Parse ``{key:value, ...}``."""
    if not text:
        return {}
    body = text.strip()[1:-1]
    attrs: dict[str, AttrValue] = {}
    for item in split_top(body):
        key, sep, value = item.partition(":")
        if not sep or not _IDENT.match(key.strip()):
            raise ParseError(f"bad attribute {item!r}: expected key:value", line=line)
        attrs[key.strip()] = parse_attr_value(value, line)
    return attrs


def parse_tensor_type(text: str, line: int, dynamic: bool = False) -> tuple[tuple[int, ...], str]:
    """``tensor<4x3xf32>`` (optionally ``pd.``-prefixed) -> ((4, 3), "float32"); with ``dynamic``,
    PIR's -1 (a dynamic dim) is kept as ``DYNAMIC``."""
    try:
        return _known_type(text, dynamic)
    except ParseError as e:
        raise ParseError(e.reason, line=line) from None


@functools.lru_cache(maxsize=4096)
def _known_type(text: str, dynamic: bool) -> tuple[tuple[int, ...], str]:
    """``parse_tensor_type`` without the line (programs repeat their types: each is parsed once)."""
    m = _TENSOR.match(text.strip())
    if not m:
        raise ParseError(f"bad type {text.strip()!r}: expected tensor<dims x dtype>")
    *dims, short = m.group("body").split("x") if m.group("body") else [""]
    if short not in _DTYPES:
        raise ParseError(f"unsupported dtype {short!r} in {text.strip()!r}")
    try:
        shape = tuple(int(d) for d in dims)
    except ValueError:
        raise ParseError(f"bad dimension in {text.strip()!r}") from None
    if any(d < 0 and not (dynamic and d == DYNAMIC) for d in shape):
        raise ParseError(f"negative dimension in {text.strip()!r}")
    return shape, _DTYPES[short]


@functools.lru_cache(maxsize=4096)
def format_tensor_type(shape: tuple[int, ...], dtype: str) -> str:
    short = DTYPE_SHORT.get(dtype, dtype.replace("<", "[").replace(">", "]"))  # PRNG keys: key[fry]
    return "tensor<" + "".join(f"{d}x" for d in shape) + short + ">"


def format_attr_value(value: AttrValue) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return "array[" + ",".join(repr(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str) and not _IDENT.match(value):
        return '"' + value.replace('"', '\\"') + '"'
    return str(value)


def format_attrs(attrs: dict[str, AttrValue]) -> str:
    return "{" + ",".join(f"{k}:{format_attr_value(v)}" for k, v in attrs.items()) + "}"


def _names(text: str, line: int, what: str) -> tuple[str, ...]:
    names = tuple(split_top(text))
    for n in names:
        if not _VALUE.match(n) and n != NULL_VALUE:
            raise ParseError(f"bad {what} {n!r}: expected %name", line=line)
    return names


def parse_line(text: str, number: int) -> Line:
    """Split one op line; raise ``ParseError`` naming the line if it does not fit the grammar."""
    try:
        return _parse_line(text, number)
    except ParseError as e:
        if e.line is not None:
            raise
        raise ParseError(e.reason, line=number, op=e.op) from None


def _parse_line(text: str, number: int) -> Line:
    m = _LINE.match(text)
    if not m:
        if _REGION_OP.match(text):
            name = _REGION_OP.match(text).group("name")  # type: ignore[union-attr]
            raise ParseError(
                "this control-flow op is not supported (pd_op.if is): rewrite the loop or split the "
                "program around it",
                line=number,
                op=name,
            )
        raise ParseError(f"unknown syntax: {text.strip()!r}", line=number)
    name = m.group("name")
    sig = m.group("sig")
    ins, arrow, outs = sig.partition("->")
    ins = ins.strip()
    if not arrow or not (ins.startswith("(") and ins.endswith(")")):
        raise ParseError(f"bad signature {sig.strip()!r}: expected (types) -> types", line=number, op=name)
    out_text = outs.strip()
    if out_text.startswith("(") and out_text.endswith(")"):
        out_text = out_text[1:-1]
    line = _op_line(m, number, tuple(split_top(ins[1:-1])), tuple(split_top(out_text)))
    if line.results and not line.out_types:
        raise ParseError(f"the result types are missing after '->' in {sig.strip()!r}", line=number, op=name)
    return line


def _op_line(
    m: re.Match[str],
    number: int,
    in_types: tuple[str, ...],
    out_types: tuple[str, ...],
    regions: tuple[tuple[Line, ...], ...] = (),
    region_args: tuple[tuple[str, ...], ...] = (),
) -> Line:
    """The line ``m`` matched: its results, name, operands and attributes, with these types."""
    name = m.group("name")
    try:
        attrs = parse_attrs(m.group("attrs"), number)
    except ParseError as e:
        raise ParseError(e.reason, line=number, op=name) from None
    return Line(
        number=number,
        results=_names(m.group("results"), number, "result"),
        name=name,
        operands=_names(_KEYWORD.sub("", m.group("operands")), number, "operand"),
        attrs=attrs,
        in_types=in_types,
        out_types=out_types,
        regions=regions,
        region_args=region_args,
    )


def parse_lines(numbered: Sequence[tuple[int, str]]) -> list[Line]:
    """Parse numbered op lines (``program_lines``), an op's regions included: the lines after a line
    ending in ``{`` up to its ``} else {`` and ``}`` become that op's ``regions``."""
    lines, _ = _parse_block(list(numbered), 0)
    return lines


def _parse_block(numbered: list[tuple[int, str]], start: int) -> tuple[list[Line], int]:
    """The lines from ``start`` up to a closing ``}`` (or the end); the index of that closing line."""
    out: list[Line] = []
    i = start
    while i < len(numbered):
        number, text = numbered[i]
        if text.startswith("}"):
            return out, i
        head = _REGION_HEAD.match(text)
        if head is None:
            out.append(parse_line(text, number))
            i += 1
            continue
        regions, args = [], []
        while True:
            first = i + 1
            names: tuple[str, ...] = ()
            if first < len(numbered) and numbered[first][1].startswith("^"):
                names = tuple(_BLOCK_ARG.findall(numbered[first][1]))
                first += 1
            body, i = _parse_block(numbered, first)
            regions.append(tuple(body))
            args.append(names)
            if i >= len(numbered):
                raise ParseError("a region is not closed", line=number, op=head.group("name"))
            if not numbered[i][1].endswith("{"):  # "}" ends the op; "} else {" opens its next region
                break
        outs = tuple(split_top(head.group("outs") or ""))
        out.append(_op_line(head, number, (), outs, tuple(regions), tuple(args)))
        i += 1
    return out, i


# What Python's surrogateescape makes of bytes that are not UTF-8: no name or string of a program
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def program_lines(text: str) -> list[tuple[int, str]]:
    """The numbered op lines between the outer braces of a dump (blank lines and ``//`` comments out)."""
    lines = []
    opened = closed = False
    regions = 0  # depth of nested regions ({ ... } else { ... } of a control-flow op)
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        surrogate = _LONE_SURROGATE.search(stripped)
        if surrogate:
            where = f"character {surrogate.start() + 1}"
            raise ParseError(
                f"not Unicode text ({where} is a lone surrogate: undecodable bytes)", line=number
            )
        if not stripped or stripped.startswith("//"):
            continue
        if stripped == "{" and not opened:
            opened = True
        elif stripped == "}" and opened and not closed and not regions:
            closed = True
        elif opened and not closed and (stripped.endswith("{") or stripped.startswith("}")):
            regions += stripped.endswith("{") - stripped.startswith("}")
            lines.append((number, stripped))
        elif closed:
            raise ParseError(f"unexpected text after the closing brace: {stripped!r}", line=number)
        elif not opened:
            raise ParseError(f"expected '{{' to open the program, got {stripped!r}", line=number)
        else:
            lines.append((number, stripped))
    if not opened:
        raise ParseError("empty program: expected '{ ... }'")
    if not closed:
        raise ParseError("missing closing '}'", line=len(text.splitlines()))
    return lines
