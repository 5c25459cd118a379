"""The IR text form: printing and parsing round-trip, and malformed text gives one clear ParseError."""

from __future__ import annotations

import pytest

import eqsat
from eqsat import Builder, ParseError, parse_program
from tests.conftest import EXAMPLES


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.pir")), ids=lambda p: p.stem)
def test_print_parse_print_is_identical(path):
    text = str(eqsat.load(path))
    assert str(parse_program(text)) == text


def test_builder_program_round_trips_with_every_attribute_kind():
    b = Builder()
    x = b.input("x", (2, 3, 4))
    w = b.param("w", (4, 5))
    y = b.matmul(x, w)
    parts = [b.split(y, axis=-1, sizes=(2, 3), index=i) for i in range(2)]
    z = b.concat(*parts, axis=2)
    z = b.scale(b.transpose(z, perm=(2, 0, 1)), scale=0.5, bias=-1.25)
    z = b.reduce_sum(b.cast(z, dtype="float16"), axis=0, keepdim=1)
    p = b.build(z, b.full(shape=(2,), value=float("-inf"), dtype="float32"), names=["a", "b"])
    text = str(p)
    assert "axis:2" in text and "keepdim:1" in text and "value:-inf" in text
    assert str(parse_program(text)) == text


GOOD_LINE = ' (%0) = "input" () {name:x} : () -> tensor<2x3xf32>'

BAD_TEXTS = {
    "unknown syntax": "{\n%0 = input x\n}",
    "no opening brace": ' (%0) = "input" () {name:x} : () -> tensor<2x3xf32>\n}',
    "no closing brace": "{\n" + GOOD_LINE,
    "undefined value": "{\n"
    + GOOD_LINE
    + '\n (%1) = "relu" (%7) {} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n}',
    "wrong arity": "{\n" + GOOD_LINE + '\n (%1) = "add" (%0) {} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n}',
    "bad attribute": "{\n"
    + GOOD_LINE
    + '\n (%1) = "transpose" (%0) {perm:"zz"} : (tensor<2x3xf32>) -> tensor<3x2xf32>\n}',
    "bad attribute syntax": "{\n"
    + GOOD_LINE
    + '\n (%1) = "transpose" (%0) {perm} : (tensor<2x3xf32>) -> tensor<3x2xf32>\n}',
    "type mismatch": "{\n"
    + GOOD_LINE
    + '\n (%1) = "transpose" (%0) {perm:array[1,0]} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n}',
    "unknown op": "{\n"
    + GOOD_LINE
    + '\n (%1) = "frobnicate" (%0) {} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n}',
    "unsupported dtype": '{\n (%0) = "input" () {name:x} : () -> tensor<2x3xc64>\n}',
    "bad dimension": '{\n (%0) = "input" () {name:x} : () -> tensor<2xqx3xf32>\n}',
    "defined twice": "{\n" + GOOD_LINE + "\n" + GOOD_LINE + "\n}",
    "operand type": "{\n" + GOOD_LINE + '\n (%1) = "relu" (%0) {} : (tensor<9xf32>) -> tensor<2x3xf32>\n}',
    "text after end": "{\n" + GOOD_LINE + "\n}\nextra",
    "bad perm": "{\n"
    + GOOD_LINE
    + '\n (%1) = "transpose" (%0) {perm:array[0,0]} : (tensor<2x3xf32>) -> tensor<2x3xf32>\n}',
    "missing attribute": "{\n"
    + GOOD_LINE
    + '\n (%1) = "reshape" (%0) {} : (tensor<2x3xf32>) -> tensor<6xf32>\n}',
}


@pytest.mark.parametrize("reason", sorted(BAD_TEXTS))
def test_malformed_text_raises_parse_error_naming_the_line(reason):
    with pytest.raises(ParseError) as info:
        parse_program(BAD_TEXTS[reason])
    err = info.value
    assert err.line is not None and f"line {err.line}" in str(err)
    assert err.reason


def test_parse_error_names_the_op_and_reason():
    with pytest.raises(ParseError, match=r"line 3: add: add takes 2 operands, got 1"):
        parse_program(BAD_TEXTS["wrong arity"])
    with pytest.raises(
        ParseError, match=r"line 3: transpose: declared type tensor<2x3xf32> but the op gives"
    ):
        parse_program(BAD_TEXTS["type mismatch"])
