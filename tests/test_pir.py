"""The PIR frontend: fixtures load with Paddle's quirks; bad dumps name the line, op and reason."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import eqsat
from eqsat import ParseError
from eqsat.lowering import OPAQUE_LOWERINGS, lower, register_opaque


def test_drr_fixture_folds_the_invalid_expand_of_a_full(pir_path):
    program = eqsat.load(pir_path("drr_transpose_before"))
    assert "expand" not in program.op_counts()
    fulls = [op for op in program.live_ops() if op.name == "full"]
    assert [op.attrs["shape"] for op in fulls] == [(4, 3, 16, 16)]
    assert program.outputs[0].type.shape == (4, 16, 3, 16)


def test_reshape_zero_keeps_dims_and_xshape_is_ignored(pir_path):
    program = eqsat.load(pir_path("multihead_attention_before"))
    reshapes = [op.attrs["shape"] for op in program.ops if op.name == "reshape"]
    assert reshapes[:3] == [(1, 300, 8, 32)] * 3 and reshapes[3] == (1, 300, 256)


def test_scale_with_constant_operand_becomes_scale_op(pir_path):
    program = eqsat.load(pir_path("multihead_attention_before"))
    (scale,) = [op for op in program.ops if op.name == "scale"]
    assert scale.attrs == {"scale": pytest.approx(0.176777), "bias": 0.0}


HEAD = '{\n (%0) = "pd.data" () {name:x,dtype:float32} : () -> pd.tensor<2x3xf32>\n'


def _pir(*lines: str) -> str:
    return HEAD + "\n".join(lines) + "\n}"


def test_valid_expand_of_a_data_input_loads_as_expand():
    text = _pir(
        ' (%1) = "pd.full_int_array" () {dtype:int64,value:IntArray[4,2,3]} : () -> pd.tensor<3xi64>',
        ' (%2) = "pd.expand" (%0, %1) {} : (pd.tensor<2x3xf32>, pd.tensor<3xi64>) -> pd.tensor<4x2x3xf32>',
        ' (%3) = "pd.fetch" (%2) {col:0,name:out} : (pd.tensor<4x2x3xf32>) -> pd.tensor<4x2x3xf32>',
    )
    assert eqsat.parse_pir(text).op_counts() == {"expand": 1}


BAD_PIR = {
    "declared type mismatch": (
        3,
        ' (%1) = "pd.relu" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<3x2xf32>',
        "declared type",
    ),
    "undefined value": (
        3,
        ' (%1) = "pd.relu" (%9) {} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>',
        "undefined",
    ),
    "wrong arity": (3, ' (%1) = "pd.add" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>', "operand"),
    "non-constant shape, dynamic result": (
        3,
        ' (%1, %2) = "pd.reshape" (%0, %0) {} : (pd.tensor<2x3xf32>, pd.tensor<2x3xf32>) '
        "-> pd.tensor<-1xf32>, pd.tensor<0x2x3xf32>",
        "constant",
    ),
    "bad perm": (
        3,
        ' (%1) = "pd.transpose" (%0) {perm:array[0,0]} : (pd.tensor<2x3xf32>) -> pd.tensor<2x2xf32>',
        "permutation",
    ),
    "non-broadcast expand": (
        4,
        ' (%1) = "pd.full_int_array" () {dtype:int64,value:IntArray[5,7]} : () -> pd.tensor<2xi64>\n'
        ' (%2) = "pd.expand" (%0, %1) {} : (pd.tensor<2x3xf32>, pd.tensor<2xi64>) -> pd.tensor<5x7xf32>',
        "not a broadcast",
    ),
    "matmul contraction": (
        3,
        ' (%1) = "pd.matmul" (%0, %0) {transpose_x:0,transpose_y:0} : '
        "(pd.tensor<2x3xf32>, pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>",
        "contracts",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PIR))
def test_bad_pir_names_line_op_and_reason(case):
    line, text, reason = BAD_PIR[case]
    with pytest.raises(ParseError, match=reason) as info:
        eqsat.parse_pir(
            _pir(text, ' (%9) = "pd.fetch" (%0) {name:out} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>')
        )
    assert info.value.line == line and info.value.op


def test_an_untranslated_op_with_a_dynamic_result_is_named_not_its_reader():
    """An op eqsat has no meaning for, whose result Paddle left dynamic (-1): the error names that op
    and its line (not the op that reads the result), and says no shapes= binding would help."""
    text = _pir(
        ' (%1) = "pd.my_gather" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<-1x3xf32>',
        ' (%2) = "pd.relu" (%1) {} : (pd.tensor<-1x3xf32>) -> pd.tensor<-1x3xf32>',
        ' (%3) = "pd.fetch" (%2) {name:out} : (pd.tensor<-1x3xf32>) -> pd.tensor<-1x3xf32>',
    )
    with pytest.raises(ParseError, match="does not translate this op") as info:
        eqsat.parse_pir(text)
    assert (info.value.line, info.value.op) == (3, "pd.my_gather"), info.value
    assert "line 4 (pd.relu)" in str(info.value) and "shapes=" not in str(info.value)


def test_program_without_fetch_is_an_error():
    with pytest.raises(ParseError, match=r"no pd\.fetch"):
        eqsat.parse_pir(_pir())


UNKNOWN = _pir(
    ' (%1) = "pd.transpose" (%0) {perm:array[1,0]} : (pd.tensor<2x3xf32>) -> pd.tensor<3x2xf32>',
    ' (%2) = "pd.transpose" (%1) {perm:array[1,0]} : (pd.tensor<3x2xf32>) -> pd.tensor<2x3xf32>',
    ' (%3) = "pd.my_softplus" (%2) {beta:2.0} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>',
    ' (%4) = "pd.cast" (%3) {dtype:float64} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf64>',
    ' (%5) = "pd.cast" (%4) {dtype:float32} : (pd.tensor<2x3xf64>) -> pd.tensor<2x3xf32>',
    ' (%6) = "pd.fetch" (%5) {name:out} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>',
)


@pytest.fixture
def meanings():
    """The meanings a test registers are gone after it: the registry is the process's."""
    saved = dict(OPAQUE_LOWERINGS)
    yield
    OPAQUE_LOWERINGS.clear()
    OPAQUE_LOWERINGS.update(saved)


def test_unknown_op_loads_opaque_prints_optimizes_around_and_runs(meanings):
    program = eqsat.parse_pir(UNKNOWN)
    assert program.op_counts() == {"transpose": 2, "pd.my_softplus": 1, "cast": 2}
    assert '"opaque" (%2) {op:pd.my_softplus,beta:2.0}' in str(program).replace("%3", "%2")
    result = eqsat.optimize(program)
    assert result.program.op_counts() == {"pd.my_softplus": 1}
    register_opaque("pd.my_softplus", lambda x, beta: jax.nn.softplus(beta * x) / beta)
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    (want,) = lower(program)(x)
    (got,) = result.fn(x)
    np.testing.assert_allclose(got, np.log1p(np.exp(2 * x)) / 2, rtol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_registered_meaning_may_ask_for_the_result_types(meanings):
    text = (
        "{\n"
        ' (%0) = "pd_op.data" () {name:x,dtype:float32} : () -> pd.tensor<2x3xf32>\n'
        ' (%1) = "pd_op.my_tile" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<4x3xf32>\n'
        ' () = "pd_op.fetch" (%1) {name:out} : (pd.tensor<4x3xf32>) -> pd.tensor<4x3xf32>\n'
        "}"
    )
    seen = []

    def tile(x, *, result_types):
        seen.append(result_types)
        (out,) = result_types
        return jax.numpy.tile(x, (out.shape[0] // x.shape[0], 1))

    register_opaque("pd_op.my_tile", tile)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = lower(eqsat.parse_pir(text))(x)
    assert seen == [(eqsat.TensorType((4, 3), "float32"),)]
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([x, x]))


_DATA = '{\n (%0) = "pd.data" () {name:"x"} : () -> pd.tensor<2x3xf32>\n'


_FETCH = ' (%9) = "pd.fetch" (%1) {name:"out"} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>\n}\n'


_BAD_PIR = {
    "huge full": _DATA + ' (%1) = "pd.full" () {dtype:float32,shape:IntArray[1000000,1000000],value:1.0}'
    " : () -> pd.tensor<1000000x1000000xf32>\n" + _FETCH,
    "negative dim": _DATA + ' (%1) = "pd.full" () {dtype:float32,shape:IntArray[-1,3],value:1.0}'
    " : () -> pd.tensor<2x3xf32>\n" + _FETCH,
    "1e20 dim": _DATA.replace("2x3", "100000000000000000000x3"),
    "no type": '{\n (%1) = "pd.data" () {name:"x"} : () -> \n' + _FETCH,
    "no result type after the arrow": _DATA.replace("pd.tensor<2x3xf32>", "") + _FETCH,
    "unclosed attribute list": _DATA.replace('{name:"x"}', '{name:"x",foo:[1,2}') + _FETCH,
    "unbalanced type": _DATA.replace("pd.tensor<2x3xf32>", "pd.tensor<2x3xf32>>") + _FETCH,
    "no result": _DATA
    + ' () = "pd.full_int_array" () {value:IntArray[1]} : () -> pd.tensor<1xi64>\n'
    + _FETCH,
    "combine with no result": _DATA
    + ' () = "builtin.combine" (%0, %0) {} : (pd.tensor<2x3xf32>, pd.tensor<2x3xf32>) -> vec[]\n'
    + ' (%1) = "pd.relu" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>\n'
    + _FETCH,
    "shape with no result": _DATA
    + ' () = "pd.shape64" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<2xi64>\n'
    + ' (%1) = "pd.relu" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>\n'
    + _FETCH,
    "lone surrogate in a name": _DATA.replace('"x"', '"x\udcea"')
    + ' (%1) = "pd.relu" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>\n'
    + _FETCH,
    "reshape 0 beyond rank": _DATA
    + ' (%5) = "pd.full_int_array" () {value:IntArray[0,0,0,6]} : () -> pd.tensor<4xi64>\n'
    ' (%1) = "pd.reshape" (%0, %5) {} : (pd.tensor<2x3xf32>, pd.tensor<4xi64>) -> pd.tensor<2x3xf32>\n'
    + _FETCH,
    "concat axis list": _DATA + ' (%3) = "builtin.combine" (%0, %0) {} : () -> vec[]\n'
    ' (%4) = "pd.full_int_array" () {value:IntArray[0,1]} : () -> pd.tensor<2xi64>\n'
    ' (%1) = "pd.concat" (%3, %4) {} : () -> pd.tensor<4x3xf32>\n' + _FETCH,
    "bias not a number": _DATA
    + ' (%3) = "pd.full" () {dtype:float32,shape:IntArray[1],value:2.0} : () -> pd.tensor<1xf32>\n'
    ' (%1) = "pd.scale" (%0, %3) {bias:"abc"}'
    " : (pd.tensor<2x3xf32>, pd.tensor<1xf32>) -> pd.tensor<2x3xf32>\n" + _FETCH,
    "transpose flag 5": _DATA + ' (%1) = "pd.matmul" (%0, %0) {transpose_x:0,transpose_y:5}'
    " : (pd.tensor<2x3xf32>, pd.tensor<2x3xf32>) -> pd.tensor<2x2xf32>\n" + _FETCH.replace("2x3", "2x2"),
}


@pytest.mark.parametrize("name", sorted(_BAD_PIR))
def test_bad_pir_is_one_parse_error_naming_the_line(name):
    with pytest.raises(ParseError, match=r"line \d+"):
        eqsat.parse_pir(_BAD_PIR[name])


def test_a_non_utf8_file_is_a_parse_error(tmp_path):
    path = tmp_path / "bad.pir"
    path.write_bytes(b'{\n (%0) = "pd.data" () {name:"\xff\xfe"} : () -> pd.tensor<2xf32>\n}\n')
    with pytest.raises(ParseError, match="UTF-8"):
        eqsat.load(path)


@pytest.mark.slow
def test_pir_mutations_never_raise_internal_errors():
    """Random byte-level mutations of a valid dump: each loads, or fails with a ParseError."""
    text = _DATA + ' (%1) = "pd.relu" (%0) {} : (pd.tensor<2x3xf32>) -> pd.tensor<2x3xf32>\n' + _FETCH
    rng = np.random.default_rng(0)
    alphabet = [*'0123456789-x%(){}[]:,"e.', "1e20", "-1", "true", "IntArray[", "f16", "i64"]
    for _ in range(200):
        chars = list(text)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(chars)))
            chars[i] = str(rng.choice(alphabet)) if rng.random() < 0.7 else ""
        try:
            program = eqsat.parse_pir("".join(chars))
        except ParseError:
            continue
        eqsat.optimize(program)
