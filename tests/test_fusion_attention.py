"""Fusion, attention and the softmax stats form: the rewrites chosen by cost, and the flash lowering."""

from __future__ import annotations

from math import prod

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat import Builder, Limits, numerics
from eqsat.lowering import lower
from eqsat.ops import flash
from eqsat.ops.attention import flash_attention, naive_attention
from eqsat.saturate import NODE_SLACK
from eqsat.verify import validate

ATTENTION_OPS = {"attention", "flash_attention"}
RNG = np.random.default_rng(1)
CPU = "roofline:cpu"


def _attention_program(s, batch=1, heads=8, d=64, mask=True):
    b = Builder()
    q, k, v = (b.input(n, (batch, heads, s, d)) for n in "qkv")
    scores = b.scale(b.matmul(q, k, transpose_y=1), scale=d**-0.5)
    if mask:
        scores = b.add(scores, b.input("mask", (batch, 1, 1, s)))
    return b.build(b.matmul(b.softmax(scores, axis=-1), v))


def test_multihead_attention_fixture_becomes_one_attention_op(pir_path):
    program = eqsat.load(pir_path("multihead_attention_before"))
    result = eqsat.optimize(program, verify=True)
    counts = result.program.op_counts()
    assert sum(counts.get(op, 0) for op in ATTENTION_OPS) == 1, counts
    assert "softmax" not in counts and counts.get("matmul", 0) == 0
    (want,) = jax.jit(lower(program))()
    (got,) = result.fn()
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize(
    ("s", "expected"), [(512, "attention"), (2048, "flash_attention"), (4096, "flash_attention")]
)
def test_cost_keeps_naive_attention_short_and_streams_long(s, expected):
    result = eqsat.optimize(_attention_program(s), cost=CPU)
    assert expected in result.program.op_counts()
    assert not ATTENTION_OPS - {expected} & set(result.program.op_counts())


def test_attention_written_with_jax_nn_is_recognized():
    def attn(q, k, v, mask):
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1]) + mask
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(1, 2, 16, 8)), jnp.float32) for _ in range(3))
    mask = jnp.zeros((1, 1, 1, 16))
    fast = eqsat.jit(attn, verify=True)
    np.testing.assert_allclose(fast(q, k, v, mask), attn(q, k, v, mask), rtol=1e-5, atol=1e-6)
    counts = next(iter(fast.results.values())).program.op_counts()
    assert ATTENTION_OPS & set(counts) and "exp" not in counts, counts


@pytest.mark.parametrize("batch", [(), (3,), (2, 3), (2, 1, 3)], ids=str)
def test_attention_with_any_number_of_batch_dims_is_recognized(batch):
    """No batch dims (one head), one, two, or three with a unit dim: one attention op each."""

    def attn(q, k, v):
        scores = jnp.einsum("...qd,...kd->...qk", q, k) * 0.125
        return jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(scores, axis=-1), v)

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(*batch, 16, 8)), jnp.float32) for _ in range(3))
    fast = eqsat.jit(attn)
    np.testing.assert_allclose(fast(q, k, v), jax.jit(attn)(q, k, v), rtol=1e-5, atol=1e-6)
    (result,) = fast.results.values()
    assert sum(result.program.op_counts().get(op, 0) for op in ATTENTION_OPS) == 1, result.program


def test_matmul_chain_is_reassociated_to_matrix_vector_products():
    b = Builder()
    a, bb, c = (b.input(n, (256, 256)) for n in "abc")
    x = b.input("x", (256, 1))
    program = b.build(b.matmul(b.matmul(b.matmul(a, bb), c), x))
    result = eqsat.optimize(program, cost=CPU, verify=True)
    assert all(op.output.type.shape == (256, 1) for op in result.program.live_ops())
    assert "matmul-assoc" in result.report.rules_fired


def test_long_chain_stays_bounded_and_correct():
    b = Builder()
    mats = [b.input(f"m{i}", (8, 8)) for i in range(10)]
    out = mats[0]
    for m in mats[1:]:
        out = b.matmul(out, m)
    program = b.build(out)
    limits = Limits(max_nodes=3000)
    result = eqsat.optimize(program, cost=CPU, limits=limits)
    validate(program, result.program, rules_fired=sorted(result.report.rules_fired))
    assert all(it.nodes <= NODE_SLACK * limits.max_nodes for it in result.report.saturation.iterations)


def _qkv_program(constant_weights: bool):
    """Q/K/V projections; with constant weights, packing them is done once, at compile time."""
    b = Builder()
    x = b.input("x", (1, 128, 768))

    def data(*shape):
        return RNG.normal(size=shape) * 0.03 if constant_weights else None

    outs = [
        b.linear(
            x, b.param(f"w{i}", (768, 768), data=data(768, 768)), b.param(f"b{i}", (768,), data=data(768))
        )
        for i in range(3)
    ]
    return b.build(*outs)


def test_qkv_is_not_merged_on_cpu_when_the_weights_must_be_concatenated_each_call():
    result = eqsat.optimize(_qkv_program(constant_weights=False), cost=CPU)
    assert "merge-shared-input-matmuls" in result.report.rules_fired
    assert result.program.op_counts() == {"linear": 3}


def test_qkv_merge_is_chosen_on_h100_with_constant_weights_where_launches_dominate():
    result = eqsat.optimize(_qkv_program(constant_weights=True), cost="roofline:h100", verify=True)
    counts = result.program.op_counts()
    assert counts["linear"] == 1 and counts["split"] == 3 and counts["concat"] == 2


def test_matmul_bias_relu_fuse_into_one_linear():
    b = Builder()
    x, w, bias = b.input("x", (4, 64, 32)), b.param("w", (32, 16)), b.param("bias", (16,))
    program = b.build(b.relu(b.add(b.matmul(x, w), bias)))
    result = eqsat.optimize(program, cost=CPU, verify=True)
    (op,) = result.program.live_ops()
    assert op.name == "linear" and op.attrs["act"] == "relu"


def test_distributivity_factors_a_shared_weight():
    b = Builder()
    x, y, w = b.input("x", (512, 1024)), b.input("y", (512, 1024)), b.param("w", (1024, 1024))
    program = b.build(b.add(b.matmul(x, w), b.matmul(y, w)))
    result = eqsat.optimize(program, cost=CPU, verify=True)
    assert result.program.op_counts() == {"add": 1, "matmul": 1}


def _qkv(shape, scale=1.0, dtype=jnp.float32):
    return tuple(jnp.asarray(RNG.normal(size=shape) * scale, dtype) for _ in range(3))


@pytest.fixture(params=["exact-blocks", "online-softmax"])
def flash_path(request, monkeypatch):
    """Run the flash lowering both ways: query blocks with an exact softmax over all keys (scores fit
    the budget), and the online softmax streaming over key blocks (budget 0)."""
    if request.param == "online-softmax":
        monkeypatch.setattr(flash, "FLASH_SCORES_BUDGET", 0)
    return request.param


NO_BIAS, KEEP_ALL = np.zeros((), np.float32), np.ones((), bool)
F32_SOFTMAX = {"scores_dtype": "float32", "softmax_dtype": "float32"}  # the op's default for f32 and half q


def _flash(q, k, v, bias=NO_BIAS, mask=KEEP_ALL, scale=0.125, **masking):
    """flash_attention under jit, traced afresh (the budget may differ), on the path the test means.
    bias and mask are closed over: numpy ones (NO_BIAS, KEEP_ALL) stay known to the lowering."""
    streams = flash.flash_blocks(prod(q.shape[:-2]), q.shape[-2], k.shape[-2])[3] > 1
    assert streams == (flash.FLASH_SCORES_BUDGET == 0 and k.shape[-2] > flash.FLASH_BLOCK_K)
    masking = {"fill": -np.inf, "causal": 0, **F32_SOFTMAX, **masking}
    return jax.jit(lambda q, k, v: flash_attention(q, k, v, bias, mask, scale=scale, **masking))(q, k, v)


def _compare(q, k, v, bias=NO_BIAS, mask=KEEP_ALL, rtol=1e-5, **masking):
    """flash (on the test's path) against naive attention in float32, NaNs included."""
    masking = {"fill": -np.inf, "causal": 0, **F32_SOFTMAX, **masking}
    f32 = (t.astype(jnp.float32) for t in (q, k, v))
    want = naive_attention(*f32, bias, mask, scale=0.125, **masking)
    got = _flash(q, k, v, bias, mask, **masking)
    assert got.dtype == q.dtype
    want, got = np.asarray(want), np.asarray(got, np.float32)
    assert np.array_equal(np.isnan(want), np.isnan(got))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("s", [7, 512, 700, 1300])
def test_flash_matches_naive_with_random_neg_inf_bias(s, flash_path):
    q, k, v = _qkv((1, 2, s, 16))
    bias = jnp.where(RNG.random((1, 2, s, s)) < 0.3, -jnp.inf, 0.0).astype(jnp.float32)
    _compare(q, k, v, bias)


def test_flash_fully_masked_rows_are_nan_like_naive(flash_path):
    q, k, v = _qkv((1, 1, 600, 8))
    bias = jnp.zeros((1, 1, 600, 600)).at[:, :, 5].set(-jnp.inf).at[:, :, 550].set(-jnp.inf)
    _compare(q, k, v, bias)


@pytest.mark.parametrize("fill", [-np.inf, -1e9, float(np.finfo(np.float32).min)])
@pytest.mark.parametrize("s", [7, 700, 1300])
def test_flash_matches_naive_with_a_boolean_mask_and_its_fill(s, fill, flash_path):
    """A fully masked row is NaN with a -inf fill and the uniform average of v with a finite one."""
    q, k, v = _qkv((2, 2, s, 16))
    mask = jnp.asarray(RNG.random((2, 1, s, s)) < 0.7).at[0, :, 3].set(False)
    _compare(q, k, v, mask=mask, fill=fill)


def _zeroed_reference(q, k, v, mask, fill, causal=0):
    """``where(keep, softmax(where(keep, q kᵀ/8, fill)), 0) v`` written out with jnp (Keras's masked
    softmax): the probabilities of masked keys are 0, so a fully masked row gives 0."""
    keep = mask & jnp.tril(jnp.ones((q.shape[-2], k.shape[-2]), bool)) if causal else mask
    scores = jnp.where(keep, jnp.einsum("...qd,...kd->...qk", q, k) * 0.125, fill)
    return jnp.where(keep, jax.nn.softmax(scores, axis=-1), 0.0) @ v


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("fill", [-np.inf, -1e9])
@pytest.mark.parametrize("s", [7, 700, 1300])
def test_attention_zeroes_masked_probabilities_like_the_program(s, fill, causal, flash_path):
    """zero_masked: both lowerings give the written-out program's result, 0 in fully masked rows
    (with either fill, where plain softmax gives NaN or the uniform average)."""
    q, k, v = _qkv((2, 2, s, 16))
    mask = jnp.asarray(RNG.random((2, 1, s, s)) < 0.7).at[0, :, 3].set(False).at[1, :, s - 1].set(False)
    masking = {"fill": fill, "causal": causal, "zero_masked": 1, **F32_SOFTMAX}
    want = np.asarray(jax.jit(_zeroed_reference, static_argnums=(4, 5))(q, k, v, mask, fill, causal))
    assert not np.isnan(want).any() and not want[0, :, 3].any()
    naive = naive_attention(q, k, v, NO_BIAS, mask, scale=0.125, **masking)
    for got in (naive, _flash(q, k, v, mask=mask, **masking)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("fill", [-np.inf, -1e9])
def test_flash_gradients_with_zeroed_masked_probabilities(fill, flash_path):
    """The blocked backward pass with zero_masked against autodiff through the written-out program
    (with a -inf fill, rows keep a key: autodiff of the program itself is NaN in an empty row)."""
    q, k, v = _qkv((1, 2, 700, 8))
    keep = RNG.random((1, 1, 700, 700)) < 0.6
    keep[..., 3, :] = fill == -np.inf
    mask = jnp.asarray(keep)
    masking = {"fill": fill, "causal": 0, "zero_masked": 1, **F32_SOFTMAX}
    weights = jnp.asarray(RNG.normal(size=q.shape), jnp.float32)

    def grads(attention):
        return jax.jit(jax.grad(lambda q, k, v: jnp.sum(attention(q, k, v) * weights), argnums=(0, 1, 2)))(
            q, k, v
        )

    want = grads(lambda q, k, v: _zeroed_reference(q, k, v, mask, fill))
    got = grads(lambda q, k, v: flash_attention(q, k, v, NO_BIAS, mask, scale=0.125, **masking))
    for name, w, g in zip(("dq", "dk", "dv"), want, got, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("s", [7, 700, 1300])
def test_flash_matches_naive_under_a_causal_mask(s, flash_path):
    """Causal: key blocks after the diagonal are skipped, with the same result."""
    q, k, v = _qkv((1, 2, s, 16))
    _compare(q, k, v, causal=1)
    bias = jnp.asarray(RNG.normal(size=(1, 2, 1, s)), jnp.float32)
    _compare(q, k, v, bias, causal=1, fill=-1e9)


@pytest.mark.parametrize("fill", [-np.inf, -1e9])
def test_flash_causal_and_a_mask_that_empties_rows(fill, flash_path):
    """With a finite fill, a row the mask empties averages over all keys, the skipped blocks' too."""
    q, k, v = _qkv((1, 1, 1300, 8))
    mask = jnp.ones((1, 1, 1300, 1300), bool).at[:, :, 900].set(False)
    _compare(q, k, v, mask=mask, causal=1, fill=fill)


def test_flash_large_logits_stay_finite_and_as_accurate_as_naive(flash_path):
    """Logits up to ~2e4 overflow exp unless the max is subtracted; their float32 rounding alone moves
    any float32 attention by ~1e-2 here, so flash is held to naive's error against float64."""
    q, k, v = (RNG.normal(size=(2, 2, 1100, 16)) * 30.0 for _ in range(3))
    scores = np.einsum("bhqd,bhkd->bhqk", q, k)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    want = (p / p.sum(axis=-1, keepdims=True)) @ v
    args = (*(jnp.asarray(t, jnp.float32) for t in (q, k, v)), jnp.zeros((2, 1, 1, 1100)))
    got = np.asarray(_flash(*args, scale=1.0))
    naive = naive_attention(*args, KEEP_ALL, scale=1.0, fill=-np.inf, causal=0, **F32_SOFTMAX)
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() <= 2 * np.abs(np.asarray(naive) - want).max()


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_flash_accumulates_half_precision_in_float32(dtype, flash_path):
    q, k, v = _qkv((1, 2, 1024, 32), dtype=dtype)
    _compare(q, k, v, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend")
def test_flash_uses_cudnn_on_gpu_and_matches():
    q, k, v = _qkv((1, 4, 1024, 64), dtype=jnp.bfloat16)
    bias = jnp.zeros((1, 1, 1024, 1024), jnp.bfloat16)
    _compare(q, k, v, bias, rtol=3e-2)


@pytest.mark.parametrize(
    ("mask_dtype", "bias_shape", "kv_heads", "message"),
    [
        ("float32", (), 2, "mask must be bool"),
        ("bool", (3, 16, 16), 2, "bias .* does not broadcast"),
        ("bool", (), 3, "batch dims broadcasting"),
    ],
)
def test_attention_operands_that_do_not_fit_are_named(mask_dtype, bias_shape, kv_heads, message):
    b = Builder()
    q = b.input("q", (1, 2, 16, 8))
    k, v = (b.input(n, (1, kv_heads, 16, 8)) for n in "kv")
    bias, mask = b.input("bias", bias_shape), b.input("mask", (), mask_dtype)
    with pytest.raises(eqsat.ShapeError, match=message):
        b.attention(q, k, v, bias, mask, scale=1.0)


GRADIENT_CASES = {
    "plain": dict(q=(1, 2, 700, 16)),
    "causal": dict(q=(1, 2, 1300, 16), causal=1),
    "causal-square-backward-blocks": dict(q=(1, 2, 1024, 16), causal=1),  # forward: all keys in a block
    "full-bias": dict(q=(1, 2, 700, 16), bias=(1, 2, 700, 700)),
    "key-bias-causal": dict(q=(2, 2, 1300, 8), bias=(2, 1, 1, 1300), causal=1, fill=-1e9),
    "mask-finite-fill": dict(q=(2, 2, 700, 8), mask=(2, 1, 700, 700), fill=-1e9),
    "mask-causal": dict(q=(1, 2, 1300, 8), mask=(1, 1, 1300, 1300), causal=1),
    "gqa": dict(q=(1, 2, 3, 700, 16), kv=(1, 2, 1, 700, 16), causal=1),
    "softcap-causal": dict(q=(1, 2, 1300, 16), causal=1, softcap=1.0),
    # q kᵀ rounded to bfloat16: blockwise sums round to a neighbouring bfloat16 (one ulp, 2^-8 relative)
    "product-rounded-to-bfloat16": dict(
        q=(1, 2, 700, 16), causal=1, product_dtype="bfloat16", tolerance=1e-2
    ),
    "softcap-bias-mask": dict(
        q=(2, 2, 700, 8), bias=(2, 1, 1, 700), mask=(2, 1, 700, 700), fill=-1e9, softcap=2.0
    ),
}


@pytest.mark.parametrize("case", sorted(GRADIENT_CASES))
def test_flash_gradients_match_naive(case, flash_path):
    """The blocked backward pass (custom VJP) against autodiff through naive attention: gradients of
    q, k, v and the bias, causal blocks skipped, masked scores constant, GQA heads summed, through a
    soft-cap."""
    spec = GRADIENT_CASES[case]
    q, _, _ = _qkv(spec["q"])
    _, k, v = _qkv(spec.get("kv", spec["q"]))
    bias = jnp.asarray(RNG.normal(size=spec["bias"]), jnp.float32) if "bias" in spec else NO_BIAS
    masking = {"fill": spec.get("fill", -np.inf), "causal": spec.get("causal", 0), **F32_SOFTMAX}
    masking |= {"softcap": spec.get("softcap", 0.0), "product_dtype": spec.get("product_dtype", "float32")}
    mask = KEEP_ALL
    if "mask" in spec:  # the diagonal kept with a -inf fill (an empty row is NaN), row 3 emptied else
        keep = RNG.random(spec["mask"]) < 0.8
        keep[..., 3, :] = False
        mask = jnp.asarray(keep | np.eye(keep.shape[-1], dtype=bool) if masking["fill"] == -np.inf else keep)
    weights = jnp.asarray(RNG.normal(size=(*q.shape[:-1], v.shape[-1])), jnp.float32)

    def loss(attention):
        def f(q, k, v, bias):
            return jnp.sum(attention(q, k, v, bias, mask, scale=0.125, **masking) * weights)

        return jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))(q, k, v, bias)

    want, got = loss(naive_attention), loss(flash_attention)
    for name, w, g in zip(("dq", "dk", "dv", "dbias"), want, got, strict=True):
        assert g.shape == w.shape, name
        tol = spec.get("tolerance", 1e-4)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_flash_gradients_of_half_precision_accumulate_in_float32(dtype, flash_path):
    q, k, v = _qkv((1, 2, 1100, 32), dtype=dtype)
    f32 = tuple(t.astype(jnp.float32) for t in (q, k, v))

    def grads(attention, args):
        def f(q, k, v):
            return jnp.sum(
                attention(q, k, v, NO_BIAS, KEEP_ALL, scale=0.125, fill=-np.inf, causal=1, **F32_SOFTMAX)
            )

        return jax.jit(jax.grad(f, argnums=(0, 1, 2)))(*args)

    for w, g in zip(grads(naive_attention, f32), grads(flash_attention, (q, k, v)), strict=True):
        assert g.dtype == dtype
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w), rtol=5e-2, atol=5e-2)


# ---- the program's own roundings ---------------------------------------------------------------------


def _half_scores(q, k, v):
    """The product, its scaling and the softmax in q's (half) dtype, as written."""
    return jax.nn.softmax((q @ k.T) * 0.5, axis=-1) @ v


def _float32_softmax(q, k, v):
    """q kᵀ rounded to bfloat16, a float32 softmax whose probabilities are cast back to bfloat16."""
    p = jax.nn.softmax((q @ k.T).astype(jnp.float32), axis=-1).astype(q.dtype)
    return (p @ v).astype(jnp.float32)


# (program, q's dtype, data spread, relative error the unfused program tolerates against itself)
ROUNDINGS = [
    (_half_scores, "bfloat16", 30.0, 6e-2),
    (_half_scores, "float16", 8.0, 2e-2),
    (_float32_softmax, "bfloat16", 30.0, 6e-2),
    (_float32_softmax, "float64", 1.0, 1e-9),
]


@pytest.mark.parametrize(("fn", "dtype", "spread", "tol"), ROUNDINGS, ids=lambda p: getattr(p, "__name__", p))
@pytest.mark.parametrize("op", sorted(ATTENTION_OPS))
def test_attention_keeps_the_programs_roundings(fn, dtype, spread, tol, op):
    """Large scores in half precision (a bfloat16 ulp of 8 near 1e3), a float32 softmax inside float64
    code: the fused op rounds where the program does, so both lowerings match it (before, the scores
    were kept in float32 and outputs moved by O(1)). Half-precision programs are run op by op, each op
    rounding its result as written (jax.jit may keep excess precision across a bfloat16 round trip);
    the float64 one by jax.jit (op by op, its float32 softmax would round differently)."""
    rng = np.random.default_rng(2)
    with jax.enable_x64(dtype == "float64"):
        q, k = (jnp.asarray(rng.normal(size=(4, 4)) * spread, dtype) for _ in range(2))
        v = jnp.asarray(rng.normal(size=(4, 2)), dtype)
        original = eqsat.from_jax(fn, q, k, v)
        program = eqsat.optimize(original, cost="roofline:cpu").program
        (fused,) = [o for o in program.live_ops() if o.name in ATTENTION_OPS]
        fused.name = op
        reference = jax.jit(fn) if dtype == "float64" else lambda *a: lower(original)(*a)[0]
        want = np.asarray(reference(q, k, v), np.float64)
        (got,) = jax.jit(lower(program))(q, k, v)
    # flash computes the softmax blockwise: within a rounding of the narrowest dtype on the path
    bound = tol if op == "attention" else max(tol, 1e-5)
    assert np.abs(np.asarray(got, np.float64) - want).max() <= bound * np.abs(want).max()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_flash_gradients_keep_half_precision_scores(dtype):
    """The blocked backward pass recomputes the probabilities from the scores as the program rounds
    them. Against float64 gradients of the program whose scores are rounded as it rounds them, flash
    is within the dtype's rounding tolerance, or closer than autodiff through the naive lowering (which
    also rounds the softmax's backward pass in half precision) at scores near 1e3."""
    rng = np.random.default_rng(5)
    q, k = (jnp.asarray(rng.normal(size=(1, 2, 64, 8)) * 8, dtype) for _ in range(2))
    v = jnp.asarray(rng.normal(size=(1, 2, 64, 8)), dtype)
    attrs = {"scale": 0.5, "fill": -np.inf, "causal": 1, "scores_dtype": dtype, "softmax_dtype": dtype}

    def grads(attention):
        def loss(q, k, v):
            return jnp.sum(attention(q, k, v, NO_BIAS, KEEP_ALL, **attrs).astype(jnp.float32) ** 2)

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)

    def reference(q, k, v):
        exact = jnp.einsum("...qd,...kd->...qk", q, k) * 0.5
        rounded = (jnp.einsum("...qd,...kd->...qk", *(t.astype(dtype) for t in (q, k))) * 0.5).astype(
            exact.dtype
        )
        s = exact + jax.lax.stop_gradient(rounded - exact)  # the program's rounding, differentiated through
        rows = jnp.arange(s.shape[-1])
        s = jnp.where(rows[:, None] >= rows[None, :], s, -jnp.inf)
        return jnp.sum((jax.nn.softmax(s, axis=-1) @ v) ** 2)

    with jax.enable_x64(True):
        want = jax.grad(reference, argnums=(0, 1, 2))(*(t.astype(jnp.float64) for t in (q, k, v)))
    for w, naive, streamed in zip(want, grads(naive_attention), grads(flash_attention), strict=True):
        w = np.asarray(w)
        naive_error, flash_error = (
            np.abs(np.asarray(g, np.float64) - w).max() / np.abs(w).max() for g in (naive, streamed)
        )
        assert flash_error <= max(naive_error, numerics.tolerance(dtype))
