"""A program with a dynamic batch is optimized once: other sizes carry its choices
(``OptimizeResult.specialized``, ``eqsat.guided``), found in each size's own e-graph."""

from __future__ import annotations

import numpy as np

import eqsat
from eqsat import Builder, Limits
from eqsat.api import carry
from eqsat.ir import Program
from eqsat.lowering import lower
from eqsat.options import CARRIED, Options
from eqsat.verify import validate

_RNG = np.random.default_rng(0)
_W = _RNG.normal(size=(16, 16)).astype(np.float32)
_BIAS = _RNG.normal(size=16).astype(np.float32)


def _block(batch: int, extra: bool = False) -> Program:
    """Tokens (batch, 8, 16) through a dense layer as frameworks write it (flattened to rows, a
    matmul, a bias, reshaped back, a transpose pair), then a softmax over the features."""
    b = Builder()
    x = b.input("x", (batch, 8, 16))
    w, bias = b.param("w", (16, 16), data=_W), b.param("b", (16,), data=_BIAS)
    rows = b.reshape(x, shape=(batch * 8, 16))
    dense = b.reshape(b.relu(b.add(b.matmul(rows, w), bias)), shape=(batch, 8, 16))
    twice = b.transpose(b.transpose(dense, perm=(0, 2, 1)), perm=(0, 2, 1))
    out = b.softmax(b.exp(twice) if extra else twice, axis=2)
    return b.build(out)


def _dynamic(build=_block) -> Program:
    """The program at batch 1, its batch dynamic, read again at other sizes as a loader would."""
    program = build(1)
    program.dynamic = {"x": (-1, 8, 16)}
    program.specialize = lambda bound: build(bound["x"][0])
    return program


def _x(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).normal(size=(batch, 8, 16)).astype(np.float32)


def test_a_dynamic_batch_is_optimized_once_and_its_choices_carried_to_other_sizes():
    result = eqsat.optimize(_dynamic())
    template = result.specialized(_x(2))  # batch 1's program drops the batch: choices are made at 2
    assert template.report.extractor != CARRIED
    for batch in (3, 5, 8):
        carried = result.specialized(_x(batch))
        assert carried.report.extractor == CARRIED
        assert carried.report.kernels_timed == 0
        assert "the program optimized at 2x8x16 carried to this size" in carried.report.note
        assert carried.program.op_counts() == template.program.op_counts()
        assert carried.program.inputs[0].type.shape == (batch, 8, 16)
        validate(_block(batch), carried.program)
        (got,) = result.fn(_x(batch))
        (want,) = lower(_block(batch))(_x(batch))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert result.specialized(_x(5)) is result.specialized(_x(5))  # found once per shape


def test_a_size_bound_at_two_or_more_is_itself_the_template():
    program = _block(4)
    program.dynamic = {"x": (-1, 8, 16)}
    program.specialize = lambda bound: _block(bound["x"][0])
    result = eqsat.optimize(program)
    carried = result.specialized(_x(3))
    assert carried.report.extractor == CARRIED
    assert "optimized at 4x8x16" in carried.report.note


def test_choices_with_no_counterpart_at_a_size_are_made_there():
    """The program read at 7 is another program (an exp more): the template's ops are not all in its
    e-graph, so that size is optimized itself; carrying the template directly finds nothing."""
    options = Options.of()
    template = eqsat.optimize(_block(2))
    assert carry(_block(7, extra=True), template, options) is None

    def build(batch: int) -> Program:
        return _block(batch, extra=batch == 7)

    result = eqsat.optimize(_dynamic(build))
    other = result.specialized(_x(7))
    assert other.report.extractor != CARRIED
    validate(_block(7, extra=True), other.program)


def test_a_carried_program_is_checked_where_verification_is_asked(monkeypatch):
    checked = []
    monkeypatch.setattr("eqsat.verify.validate", lambda original, optimized, **kw: checked.append(original))
    result = eqsat.optimize(_dynamic(), verify=True)
    result.specialized(_x(2))
    checked.clear()
    carried = result.specialized(_x(3))
    assert carried.report.extractor == CARRIED
    assert [p.inputs[0].type.shape for p in checked] == [(3, 8, 16)]


def test_a_carry_cut_short_by_the_time_limit_is_not_kept():
    """The time limit passes before saturation ends: the template did not decide, so nothing is
    carried (``specialized`` then optimizes the size itself, reporting the cut)."""
    template = eqsat.optimize(_block(2))
    assert carry(_block(5), template, Options.of(limits=Limits(timeout_s=0.0))) is None
    assert carry(_block(5), template, Options.of()) is not None
    cut = eqsat.optimize(_block(2), limits=Limits(timeout_s=0.0))
    assert cut.report.cut_short
    assert carry(_block(5), cut, Options.of()) is None  # a template cut short is not carried either
