"""flash_attention on each backend's own kernels (``eqsat.ops.attention_kernels``): every call routed to
a kernel or to eqsat's lowering with a reason, and every kernel path run here in interpret mode against
the program as written and eqsat's CPU lowering, forward and gradient."""

from __future__ import annotations

import contextlib
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat import numerics
from eqsat.cost import Roofline, phases
from eqsat.devices import DEVICES, Device
from eqsat.ops import OPS
from eqsat.ops import attention_kernels as kernels
from eqsat.ops.attention import flash_attention, naive_attention
from eqsat.ops.attention_call import AttentionCall
from eqsat.types import TensorType

KEEP_ALL = np.ones((), bool)
KEEP_TYPE = TensorType((), "bool")
NO_BIAS = np.zeros((), np.float32)


def _call(
    q=(1, 2, 128, 64),
    k=None,
    v=None,
    dtype="float32",
    bias=None,
    masked=False,
    causal=False,
    fill=-math.inf,
    scale=0.125,
    scores="float32",
    softmax="float32",
    shifted=True,
    softcap=0.0,
    product="float32",
) -> kernels.Call:
    k = k or q
    attention = AttentionCall(
        scale=scale,
        fill=fill,
        causal=causal,
        scores_dtype=scores,
        softmax_dtype=softmax,
        shifted=shifted,
        softcap=softcap,
        product_dtype=product,
    )
    return kernels.Call(attention, q, k, v or k, dtype, bias, masked)


def test_every_call_goes_to_a_kernel_or_says_why_not():
    """Over the product of everything a call carries, on each backend: a kernel of that backend, or
    eqsat's lowering with every kernel's reason; and each kernel is reached."""
    reached: dict[str, set[str]] = {on: set() for on in ("cpu", *kernels.KERNELS)}
    shapes = [
        ((1, 2, 128, 64), (1, 2, 128, 64), (1, 2, 128, 64)),
        ((2, 4, 256, 64), (2, 1, 128, 64), (2, 1, 128, 64)),  # GQA, fewer keys
        ((4, 100, 32), (4, 100, 32), (4, 100, 32)),  # rank 3, ragged
        ((1, 2, 128, 160), (1, 2, 128, 160), (1, 2, 128, 96)),  # head dims differ
        ((1, 2, 128, 256), (1, 2, 128, 256), (1, 2, 128, 256)),
    ]
    dtypes = ("float16", "bfloat16", "float32", "float64")
    roundings = (("float32", "float32"), ("bfloat16", "float32"), ("float64", "float64"))
    product = itertools.product(
        shapes, dtypes, roundings, (None, "same", "float32"), (False, True), (False, True),
        (-math.inf, -1e9, -1.0), (0.125, 0.3), (True, False), (0.0, 30.0),
    )  # fmt: skip
    for (q, k, v), dtype, (scores, softmax), bias, masked, causal, fill, scale, shifted, cap in product:
        bias = dtype if bias == "same" else bias
        call = _call(q, k, v, dtype, bias, masked, causal, fill, scale, scores, softmax, shifted, cap)
        for on in reached:
            r = kernels.route(call, on)
            names = {kernel.name for kernel in kernels.KERNELS.get(on, ())}
            assert r.kernel in names | {"xla"}, (on, call, r)
            assert r.kernel != "xla" or r.reason, (on, call)
            assert {name for name, _ in r.refused} <= names | {"xla"}
            reached[on].add(r.kernel)
    assert reached == {"cpu": {"xla"}, "gpu": {"cudnn", "pallas-gpu", "xla"}, "tpu": {"pallas-tpu", "xla"}}


@pytest.mark.parametrize(
    ("call", "refused"),
    [
        (_call(dtype="bfloat16", masked=True), "a boolean mask"),
        (_call(dtype="bfloat16", causal=True, fill=-1.0), "a causal fill of -1.0"),
        (_call(dtype="bfloat16", scores="bfloat16"), "scores in bfloat16"),
        (_call(dtype="bfloat16", shifted=False), "an unshifted softmax"),
        (_call(q=(1, 2, 100, 256), dtype="bfloat16"), "lengths 100 and 100"),
        (_call(q=(1, 2, 128, 256), dtype="bfloat16", bias="float32"), "a bias (the kernel takes none)"),
        (_call(), "q of dtype float32 (takes float16, bfloat16)"),
        (_call(dtype="bfloat16", softcap=50.0), "scores soft-capped at 50"),
        (_call(dtype="bfloat16", product="bfloat16"), "q kᵀ rounded to bfloat16"),
    ],
)
def test_refusals_name_the_reason(call, refused):
    r = kernels.route(call, "gpu")
    assert r.kernel == "xla"
    assert refused in r.reason, r.reason


def _inputs(shape, kv_heads, dtype, bias, seed=0):
    rng = np.random.default_rng(seed)
    b, h, s, d = shape
    q = jnp.asarray(rng.normal(size=shape), dtype)
    k, v = (jnp.asarray(rng.normal(size=(b, kv_heads, s, d)), dtype) for _ in range(2))
    mask = jnp.asarray(rng.normal(size=(1, h, s, s)), bias) if bias else NO_BIAS
    return q, k, v, mask


def _check(on, expected_kernel, shape, dtype, *, kv_heads=None, bias=None, device=False, **extra):
    """``flash_attention`` under ``interpret(on)`` takes ``expected_kernel`` and agrees with the program
    as written (naive attention, in float64 for the reference, in the inputs' dtype as jax.jit runs it)
    and with eqsat's CPU lowering, forward and gradient. ``device``: on this machine's GPU, for real."""
    q, k, v, b = _inputs(shape, kv_heads or shape[1], dtype, bias)
    attrs = {
        "scale": 0.125,
        "fill": -np.inf,
        "causal": 0,
        "scores_dtype": "float32",
        "softmax_dtype": "float32",
    }
    attrs |= extra
    cotangent = jnp.asarray(np.random.default_rng(1).normal(size=shape), dtype)

    def outputs(fn, args):
        def loss(q, k, v):
            return (fn(q, k, v, args[3], KEEP_ALL, **attrs).astype(jnp.float32) * cotangent).sum()

        out = jax.jit(lambda q, k, v: fn(q, k, v, args[3], KEEP_ALL, **attrs))(*args[:3])
        return [out, *jax.jit(jax.grad(loss, (0, 1, 2)))(*args[:3])]

    with contextlib.nullcontext() if device else kernels.interpret(on):
        call = kernels.Call.of(AttentionCall.of(attrs), q, k, v, bias and b, None)
        assert kernels.route(call).kernel == expected_kernel, kernels.route(call)
        got = outputs(flash_attention, (q, k, v, b))
        traced = str(jax.make_jaxpr(lambda q, k, v: flash_attention(q, k, v, b, KEEP_ALL, **attrs))(q, k, v))
    assert ("pallas_call" in traced) == expected_kernel.startswith("pallas"), expected_kernel
    with jax.default_device(jax.devices("cpu")[0]):
        cpu = outputs(flash_attention, (q, k, v, b))
    as_written = outputs(naive_attention, (q, k, v, b))
    wide = tuple(jnp.asarray(x, jnp.float64) if x.ndim else x for x in (q, k, v, b))
    with jax.enable_x64(True):
        reference = outputs(naive_attention, wide)
    name_of = jnp.dtype(dtype).name
    for name, r, want, ours, theirs in zip(
        ("out", "dq", "dk", "dv"), reference, as_written, cpu, got, strict=True
    ):
        assert numerics.judge(r, want, theirs, name_of) is None, (
            name,
            numerics.judge(r, want, theirs, name_of),
        )
        assert numerics.compare(ours, theirs, name_of) is None, (
            name,
            numerics.compare(ours, theirs, name_of),
        )


KERNEL_CASES = {
    "cudnn bf16 causal": ("cudnn", (1, 2, 128, 64), "bfloat16", {"causal": 1}),
    "cudnn bf16 bias MQA": ("cudnn", (2, 4, 64, 32), "bfloat16", {"bias": "bfloat16", "kv_heads": 1}),
    "cudnn bf16 divisor": ("cudnn", (1, 2, 64, 64), "bfloat16", {"divisor": 8.0, "scale": 1.0}),
    # head dims over 128 (Gemma's 256) go to Pallas: cuDNN takes up to 128
    "pallas-gpu bf16 head dim 256": ("pallas-gpu", (1, 2, 128, 256), "bfloat16", {}),
    "pallas-gpu bf16 causal GQA": ("pallas-gpu", (2, 4, 64, 256), "bfloat16", {"causal": 1, "kv_heads": 1}),
    "pallas-gpu bf16 causal finite fill zero_masked": (
        "pallas-gpu",
        (1, 2, 64, 256),
        "bfloat16",
        {"causal": 1, "fill": -1e9, "zero_masked": 1},
    ),
    "pallas-tpu f32 causal": ("pallas-tpu", (1, 2, 128, 64), "float32", {"causal": 1}),
    "pallas-tpu bf16 bias": ("pallas-tpu", (1, 2, 128, 64), "bfloat16", {"bias": "bfloat16", "scale": 0.5}),
    "pallas-tpu f32 bias GQA": ("pallas-tpu", (2, 2, 256, 64), "float32", {"bias": "float32", "kv_heads": 1}),
    "pallas-tpu bf16 causal finite fill": (
        "pallas-tpu",
        (1, 1, 256, 128),
        "bfloat16",
        {"causal": 1, "fill": -3e38},
    ),
}
"""Each kernel path: the kernel the call must reach, q's shape and dtype, and what the call carries."""


def _backend_of(kernel: str) -> str:
    return next(on for on, ks in kernels.KERNELS.items() if kernel in {k.name for k in ks})


@pytest.mark.slow
@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_path_matches_the_program(case):
    kernel, shape, dtype, extra = KERNEL_CASES[case]
    _check(_backend_of(kernel), kernel, shape, dtype, **extra)


@pytest.mark.gpu
@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU backend")
@pytest.mark.parametrize("case", [c for c in KERNEL_CASES if _backend_of(KERNEL_CASES[c][0]) == "gpu"])
def test_kernel_runs_on_the_gpu_as_the_program(case):
    kernel, shape, dtype, extra = KERNEL_CASES[case]
    _check("gpu", kernel, shape, dtype, device=True, **extra)


def test_a_refused_call_lowers_as_on_cpu():
    """A boolean mask goes to no kernel: under ``interpret("gpu")`` the lowering is eqsat's, bit for bit."""
    q, k, v, _ = _inputs((1, 2, 64, 32), 2, jnp.bfloat16, None)
    mask = jnp.asarray(np.random.default_rng(2).random((1, 1, 64, 64)) > 0.3)
    attrs = {"scale": 0.125, "fill": -1e9, "causal": 1, "scores_dtype": "float32", "softmax_dtype": "float32"}
    want = flash_attention(q, k, v, NO_BIAS, mask, **attrs)
    with kernels.interpret("gpu"):
        got = flash_attention(q, k, v, NO_BIAS, mask, **attrs)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_interpret_names_the_backends_it_knows():
    with pytest.raises(ValueError, match="known: gpu, tpu"), kernels.interpret("metal"):
        pass


# (cost model, q's dtype, head dim, extra rules, tolerance): Pallas' GPU kernel takes half precision,
# and a program's bfloat16 scores only with the scores widened (cuDNN takes head dims up to 128)
END_TO_END = {
    "gpu": ("roofline:h100", jnp.bfloat16, 256, ("attention-float32-softmax",), 3e-2),
    "tpu": ("roofline:tpu-v5e", jnp.float32, 64, (), 1e-4),
}


@pytest.mark.slow
@pytest.mark.parametrize("on", END_TO_END)
def test_eqsat_jit_runs_a_jax_attention_on_the_kernel(on):
    """End to end: a causal attention written in JAX, optimized to flash attention, runs on the
    backend's Pallas kernel and matches jax.jit, forward and gradient."""
    cost, dtype, head_dim, rules, tolerance = END_TO_END[on]

    def attention(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1]).astype(q.dtype)
        causal = jnp.tril(jnp.ones((s.shape[-2], s.shape[-1]), bool))
        s = jnp.where(causal, s, -jnp.inf)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    q, k, v, _ = _inputs((1, 2, 128, head_dim), 2, dtype, None, seed=3)
    fast = eqsat.jit(attention, cost=cost, rules=["default", *rules])
    with kernels.interpret(on):
        traced = str(jax.make_jaxpr(fast)(q, k, v))
        got = fast(q, k, v)
        grads = jax.grad(lambda *a: fast(*a).astype(jnp.float32).sum(), (0, 1, 2))(q, k, v)
    assert "pallas_call" in traced
    wide = [x.astype(jnp.float32) for x in (q, k, v)]
    np.testing.assert_allclose(
        np.asarray(got, np.float32), jax.jit(attention)(*wide), rtol=tolerance, atol=tolerance
    )
    want = jax.grad(lambda *a: attention(*a).sum(), (0, 1, 2))(*wide)
    for g, w in zip(grads, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), w, rtol=10 * tolerance, atol=10 * tolerance)


def _attention_program(s: int, dtype: str = "bfloat16"):
    b = eqsat.Builder()
    q, k, v = (b.input(n, (1, 8, s, 64), dtype) for n in "qkv")
    scores = b.scale(b.matmul(q, k, transpose_y=1), scale=0.125)
    return b.build(b.matmul(b.softmax(scores, axis=-1), v))


@pytest.mark.parametrize("device", ["h100", "tpu-v5e"])
def test_accelerator_profiles_price_flash_attention_as_one_kernel(device):
    """On a GPU or TPU flash attention is the backend's kernel, not a CPU loop of blocks: one kernel
    reading q, k, v and writing the output once; so extraction streams where the scores would go
    through memory, at lengths where on this CPU it keeps them."""
    model = Roofline(device)
    types = [TensorType((1, 8, 2048, 64), "bfloat16")] * 3 + [
        TensorType((), "float32"),
        TensorType((), "bool"),
    ]
    attrs = {"scale": 0.125, "fill": -math.inf, "causal": 0, "zero_masked": 0, "divisor": 1.0}
    attrs |= {"scores_dtype": "float32", "softmax_dtype": "float32", "shifted": 1}
    (kernel,) = phases("flash_attention", attrs, types, types[0], model.device)
    assert kernel.bytes == sum(t.nbytes for t in types) + types[0].nbytes and not kernel.loop_step
    assert kernel.flops == sum(k.flops for k in phases("flash_attention", attrs, types, types[0]))
    assert len(phases("flash_attention", attrs, types, types[0], DEVICES["cpu"])) > 1
    program = _attention_program(512)
    widened = ["default", "attention-float32-softmax"]
    for cost in (f"roofline:{device}", f"xla:{device}"):
        assert "flash_attention" in eqsat.optimize(program, widened, cost).program.op_counts()
    assert "flash_attention" not in eqsat.optimize(program, widened, "roofline:cpu").program.op_counts()


def test_a_call_no_kernel_takes_is_priced_as_the_loop_it_runs_as():
    """On the H100 profile, a call whose scores are rounded to bfloat16 (as a bfloat16 einsum writes
    them) goes to no kernel: it is priced as eqsat's loop of blocks, which the H100 ran 4-6x slower
    than XLA's fusion of naive attention (bench/device.json), so extraction keeps the naive form."""
    types = [TensorType((1, 8, 8192, 64), "bfloat16")] * 3 + [TensorType((), "bfloat16"), KEEP_TYPE]
    attrs = {"scale": 0.125, "causal": 1, "scores_dtype": "bfloat16", "softmax_dtype": "bfloat16"}
    device = DEVICES["h100"]
    assert OPS["flash_attention"].device_kernel(types, types[0], attrs, "gpu") is None
    looped = phases("flash_attention", attrs, types, types[0], device)
    assert len(looped) > 1 and all(k.loop_step for k in looped)
    widened = attrs | {"scores_dtype": "float32", "softmax_dtype": "float32"}
    assert OPS["flash_attention"].device_kernel(types, types[0], widened, "gpu") == "cudnn"
    assert len(phases("flash_attention", widened, types, types[0], device)) == 1
    program = _attention_program(8192)
    assert "flash_attention" not in eqsat.optimize(program, cost="xla:h100").program.op_counts()


def test_a_profile_keeps_its_kernels_through_json():
    device = DEVICES["h100"]
    assert Device.from_json(device.to_json()) == device
    data = {k: v for k, v in device.to_json().items() if k != "kernels"}  # a profile from before kernels
    assert Device.from_json(data).kernels == ()


@pytest.mark.parametrize("with_bias", [False, True])
def test_cudnn_takes_calls_of_any_rank(with_bias):
    """A rank-3 call (the unit-dims pass drops a batch of 1) goes to cuDNN as (1, heads, S, D), and
    agrees with eqsat's own lowering."""
    rng = np.random.default_rng(3)
    q, k, v = (jnp.asarray(rng.normal(size=(4, 64, 32)), jnp.bfloat16) for _ in range(3))
    bias = jnp.asarray(rng.normal(size=(4, 64, 64)), jnp.bfloat16) if with_bias else NO_BIAS
    attrs = {
        "scale": 0.125,
        "fill": -np.inf,
        "causal": 1,
        "scores_dtype": "float32",
        "softmax_dtype": "float32",
    }
    want = flash_attention(q, k, v, bias, KEEP_ALL, **attrs)
    with kernels.interpret("gpu"):
        call = kernels.Call.of(AttentionCall.of(attrs), q, k, v, bias if with_bias else None, None)
        assert kernels.route(call).kernel == "cudnn", kernels.route(call)
        got = flash_attention(q, k, v, bias, KEEP_ALL, **attrs)
    assert got.shape == want.shape
    assert numerics.compare(want, got, "bfloat16") is None, numerics.compare(want, got, "bfloat16")
