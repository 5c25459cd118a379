"""Convolutional programs: conv2d, pool2d and batch_norm as canonical ops, from JAX (flax) and from
Paddle PIR, their shape rules in Python and in the e-graph, and their lowerings against references."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import eqsat
from eqsat import Builder
from eqsat.cost import phases
from eqsat.egraph import Serialized, encode, new_egraph
from eqsat.ir import TensorType
from eqsat.lowering import lower
from eqsat.ops import OPAQUE, OPS, winograd
from eqsat.ops.conv import ALGORITHMS, LAYOUTS, WINOGRAD, taps
from eqsat.rules import resolve
from tests.agreement import same_as_jax_jit

F32 = "float32"


class _Net(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Conv(16, (3, 3), strides=(2, 2), padding="SAME")(x)
        x = nn.relu(nn.BatchNorm(use_running_average=True)(x))
        x = nn.Conv(16, (3, 3), feature_group_count=16, kernel_dilation=(2, 2))(x)  # depthwise
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
        return nn.avg_pool(x, (3, 3), strides=(1, 1), padding="SAME")


def test_flax_conv_batch_norm_and_pools_become_canonical_ops_and_match_flax():
    net, x = _Net(), jnp.ones((2, 32, 32, 3))
    variables = net.init(jax.random.key(0), x)
    stats = jax.tree_util.tree_map(lambda v: jax.random.uniform(jax.random.key(1), v.shape) + 0.5, variables)
    variables = {"params": variables["params"], "batch_stats": stats["batch_stats"]}

    def f(x):
        return net.apply(variables, x)

    counts = eqsat.from_jax(f, x).op_counts()
    assert counts["conv2d"] == 2 and counts["pool2d"] == 2, counts
    assert not [op for op in counts if op not in eqsat.ops.OPS], counts  # nothing opaque
    data = jax.random.normal(jax.random.key(2), x.shape)
    np.testing.assert_allclose(eqsat.jit(f)(data), f(data), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", [("NCHW", "OIHW"), ("NCHW", "HWIO"), ("NHWC", "HWIO"), ("NHWC", "OIHW")])
def test_jax_convolutions_in_any_kernel_layout(spec):
    data, kernel = spec
    x_shape = (2, 4, 9, 11) if data == "NCHW" else (2, 9, 11, 4)
    w_shape = (6, 2, 3, 2) if kernel == "OIHW" else (3, 2, 2, 6)

    def f(x, w):
        return jax.lax.conv_general_dilated(
            x,
            w,
            (2, 1),
            [(1, 2), (0, 1)],
            rhs_dilation=(1, 2),
            dimension_numbers=(data, kernel, data),
            feature_group_count=2,
        )

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=x_shape).astype(F32), rng.normal(size=w_shape).astype(F32)
    program = eqsat.from_jax(f, x, w)
    assert program.op_counts()["conv2d"] == 1
    result = eqsat.optimize(program, verify=True)
    np.testing.assert_allclose(lower(result.program)(x, w)[0], f(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", [("NCH", "OIH"), ("NWC", "WIO"), ("NWC", "OIW")])
def test_a_1d_convolution_is_a_conv2d_over_a_unit_height(spec):
    """Whisper's front end: a 1-D conv in either layout, strided, padded, dilated and grouped, is a
    conv2d (so its formulations and epilogues apply); values and gradients are jax.jit's."""
    data, kernel = spec
    x_shape = (2, 4, 30) if data == "NCH" else (2, 30, 4)
    w_shape = {"OIH": (6, 2, 3), "OIW": (6, 2, 3), "WIO": (3, 2, 6)}[kernel]

    def f(x, w):
        dn = (data, kernel, data)
        y = jax.lax.conv_general_dilated(
            x, w, (2,), [(1, 2)], rhs_dilation=(2,), dimension_numbers=dn, feature_group_count=2
        )
        return jnp.sum(jnp.sin(y))

    rng = np.random.default_rng(0)
    x, w = rng.normal(size=x_shape).astype(F32), rng.normal(size=w_shape).astype(F32)
    program = eqsat.from_jax(f, x, w)
    assert program.op_counts()["conv2d"] == 1 and all(op.name != OPAQUE for op in program.ops)
    for fn in (f, jax.grad(f, argnums=(0, 1))):
        got, want = (jax.tree_util.tree_leaves(out) for out in (eqsat.jit(fn)(x, w), fn(x, w)))
        for g, v in zip(got, want, strict=True):
            np.testing.assert_allclose(g, v, rtol=1e-4, atol=1e-4)


def test_the_egraph_shape_analysis_agrees_with_the_python_shape_rules():
    b = eqsat.Builder()
    x, w = b.input("x", (2, 5, 17, 12)), b.input("w", (6, 5, 4, 3))
    xn, wn = b.input("xn", (1, 13, 10, 6)), b.input("wn", (3, 3, 1, 6))
    outs = [
        b.conv2d(x, w, strides=(3, 2), padding=(1, 2, 0, 1), dilations=(2, 1)),
        b.conv2d(xn, wn, padding=(1, 1, 1, 1), groups=6, layout="NHWC"),
        b.pool2d(x, kind="max", window=(3, 2), strides=(2, 2), padding=(1, 1, 0, 1)),
        b.pool2d(xn, kind="avg_exclusive", window=(2, 2), strides=(1, 3), layout="NHWC"),
    ]
    program = b.build(*outs)
    enc = encode(program, typed=False)
    egraph = new_egraph()
    egraph.parse_and_run_program(enc.commands + "\n(run-schedule (saturate analysis))")
    graph = Serialized(egraph.serialize([]).to_json())
    for root, out in zip(enc.roots, program.outputs, strict=True):
        assert graph.types[graph.roots[root]] == out.type


def test_bad_convolutions_are_shape_errors_naming_the_reason():
    b = eqsat.Builder()
    x = b.input("x", (1, 4, 8, 8))
    with pytest.raises(eqsat.ShapeError, match="conv2d of 4 channels"):
        b.conv2d(x, b.input("w", (6, 3, 3, 3)))
    with pytest.raises(eqsat.ShapeError, match="does not fit"):
        b.conv2d(x, b.input("big", (6, 4, 9, 9)))
    with pytest.raises(eqsat.ShapeError, match="per-channel operands"):
        v = b.input("v", (3,))
        b.batch_norm(x, v, v, v, v, epsilon=1e-5, axis=1)


def _pool_reference(x, kind, window, strides, padding, exclusive):
    """Paddle's pooling formula, by loops (NCHW)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pb, pl, pr) = window, strides, padding
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    out = np.zeros((n, c, oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - pt, j * sw - pl
            part = x[:, :, max(h0, 0) : min(h0 + kh, h), max(w0, 0) : min(w0 + kw, w)]
            if kind == "max":
                out[:, :, i, j] = part.max(axis=(2, 3))
            else:
                out[:, :, i, j] = part.sum(axis=(2, 3)) / (
                    part.shape[2] * part.shape[3] if exclusive else kh * kw
                )
    return out


POOL_ATTRS = (
    'ceil_mode:{ceil},data_format:"NCHW",exclusive:{exclusive},global_pooling:false,adaptive:false,'
    'padding_algorithm:"EXPLICIT",paddings:[1,0],pooling_type:"{kind}",strides:[2,2]'
)
PIR_POOL = "\n".join(
    [
        "{{",
        '(%0) = "pd_op.data" () {{dtype:float32,name:"x",shape:[2,3,7,9]}} : () -> tensor<2x3x7x9xf32>',
        '(%1) = "pd_op.full_int_array" () {{dtype:int64,value:[3,2]}} : () -> tensor<2xi64>',
        '(%2) = "pd_op.pool2d" (%0, %1) {{'
        + POOL_ATTRS
        + "}} : (tensor<2x3x7x9xf32>, tensor<2xi64>) -> {out}",
        '(%3) = "pd_op.fetch" (%2) {{col:0,name:"out"}} : ({out}) -> {out}',
        "}}",
    ]
)


@pytest.mark.parametrize(
    "kind, exclusive, ceil",
    [("max", True, False), ("avg", True, False), ("avg", False, False), ("max", True, True)],
)
def test_paddle_pool2d_matches_paddles_formula(kind, exclusive, ceil):
    oh, ow = (4, 5) if ceil else (4, 4)
    flags = {"exclusive": str(exclusive).lower(), "ceil": str(ceil).lower()}
    text = PIR_POOL.format(kind=kind, out=f"tensor<2x3x{oh}x{ow}xf32>", **flags)
    program = eqsat.parse_pir(text)
    assert program.op_counts() == {"pool2d": 1}
    x = np.random.default_rng(0).normal(size=(2, 3, 7, 9)).astype(F32)
    padding = (1, 1, 0, 1 if ceil else 0)
    want = _pool_reference(x, kind, (3, 2), (2, 2), padding, exclusive)
    np.testing.assert_allclose(lower(program)(x)[0], want, rtol=1e-6, atol=1e-6)


PADDLE = Path(__file__).parent / "data" / "paddle"


@pytest.mark.parametrize("form", ["", ".passes"])  # as built; after Paddle's conv fusion pass
def test_paddle_conv_bias_batch_norm_relu_is_one_fused_conv_and_matches_paddle(form):
    program = eqsat.load(PADDLE / "dumps" / f"conv_bn_relu{form}.pir")
    ref = np.load(PADDLE / "refs" / "conv_bn_relu.npz")
    program.param_values.update({p.name: ref[f"param_{p.name}"] for p in program.params})
    result = eqsat.optimize(program, verify=True)
    fired = {"bias-into-batch-norm", "batch-norm-into-conv", "conv-bias-epilogue", "conv-activation-epilogue"}
    assert fired <= set(result.report.rules_fired)
    counts = result.program.op_counts()
    assert counts["conv2d_bias_act"] == 1 and not {"batch_norm", "conv2d", "relu"} & set(counts), counts
    (out,) = lower(result.program)(ref["in_x"])
    np.testing.assert_allclose(
        out, ref["out_0"] if "out_0" in ref else ref[ref.files[-1]], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("batch", [1, 3])
def test_flax_batch_norm_after_a_conv_folds_into_it(batch):
    class ConvBN(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(8, (3, 3))(x)))

    net, x = ConvBN(), jax.random.normal(jax.random.key(0), (batch, 10, 10, 3))
    variables = net.init(jax.random.key(1), x)

    def f(x):
        return net.apply(variables, x)

    result = eqsat.optimize(eqsat.from_jax(f, x), verify=True)
    assert "batch-norm-into-conv" in result.report.rules_fired
    sized = {op.name for op in result.program.live_ops() if op.outputs[0].type.size >= x.size}
    assert sized <= {"conv2d_bias_act", "reshape"}, sized  # the normalization math is on weights only
    np.testing.assert_allclose(lower(result.program)(x)[0], f(x), rtol=1e-5, atol=1e-5)


def test_a_1x1_convolution_is_a_matmul_when_that_is_cheaper():
    b = eqsat.Builder()
    x, w = b.input("x", (4, 64, 14, 14)), b.input("w", (32, 64, 1, 1))
    program = b.build(b.conv2d(x, w))
    result = eqsat.optimize(program, rules=["conv-1x1-is-matmul"], verify=True)
    assert "conv-1x1-is-matmul" in result.report.rules_fired
    kinds = set(result.program.op_counts())
    assert kinds & {"conv2d", "matmul"} and (result.report.cost_after <= result.report.cost_before)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dilation", [1, 2])
def test_a_wider_unpadded_convolution_is_not_a_matmul(layout, dilation):
    """conv-1x1-is-matmul once matched any stride-1 unpadded conv: on a 3x3 kernel its right side has
    the input's spatial shape, and saturation failed on the shape conflict (an error in the tests)."""
    b = eqsat.Builder()
    x = b.input("x", (1, 2, 7, 7) if layout == "NCHW" else (1, 7, 7, 2))
    w = b.input("w", (3, 2, 3, 3) if layout == "NCHW" else (3, 3, 2, 3))
    program = b.build(b.conv2d(x, w, dilations=(dilation, dilation), layout=layout))
    result = eqsat.optimize(program, rules=["conv-1x1-is-matmul"], verify=True)
    assert "conv-1x1-is-matmul" not in result.report.rules_fired


def test_convs_of_one_input_merge_over_concatenated_kernels():
    b = eqsat.Builder()
    x = b.input("x", (2, 8, 12, 12))
    rng = np.random.default_rng(0)
    kernels = [
        b.param(f"w{i}", (o, 8, 1, 1), data=rng.normal(size=(o, 8, 1, 1))) for i, o in enumerate((4, 6, 5))
    ]
    program = b.build(*(b.relu(b.conv2d(x, w)) for w in kernels))
    result = eqsat.optimize(program, rules=["merge-shared-input-convs"], verify=True)
    assert "merge-shared-input-convs" in result.report.rules_fired
    counts = result.program.op_counts()
    assert counts["conv2d"] == 1 and counts["split"] == 3, counts


CONV_LINE = (
    '(%2) = "pd_op.conv2d" (%0, %1) {{data_format:"{layout}",dilations:[1,1],groups:1,'
    'padding_algorithm:"EXPLICIT",paddings:{pads},strides:[1,1]}} : (tensor<1x3x8x8xf32>, {kernel}) -> {out}'
)


@pytest.mark.parametrize(
    ("layout", "pads", "kernel", "reason"),
    [
        ("NCDHW", "[0,0]", "tensor<4x3x3x3xf32>", "data_format NCDHW"),
        ("NCHW", "[1,1,1]", "tensor<4x3x3x3xf32>", "are not 2 or 4 numbers"),
        ("NCHW", "[0,0]", "tensor<4x3x3xf32>", "is not OIHW"),
        ("NCHW", "[0,0]", "tensor<4x5x3x3xf32>", "conv2d of 3 channels"),
    ],
)
def test_bad_paddle_convolutions_are_parse_errors_naming_the_line(layout, pads, kernel, reason):
    text = "\n".join(
        [
            "{",
            '(%0) = "pd_op.data" () {dtype:float32,name:"x",shape:[1,3,8,8]} : () -> tensor<1x3x8x8xf32>',
            f'(%1) = "pd_op.data" () {{dtype:float32,name:"w",shape:[4,3,3,3]}} : () -> {kernel}',
            CONV_LINE.format(layout=layout, pads=pads, kernel=kernel, out="tensor<1x4x6x6xf32>"),
            "}",
        ]
    )
    with pytest.raises(eqsat.ParseError, match=f"line 4: pd(_op)?\\.conv2d: .*{reason}"):
        eqsat.parse_pir(text)


def _fused_conv_pir(activation: str, layout: str, residual: bool) -> str:
    x, out = ("2x3x9x9", "2x4x9x9") if layout == "NCHW" else ("2x9x9x3", "2x9x9x4")
    res = "%3" if residual else "<<NULL VALUE>>"
    res_type = f"tensor<{out}xf32>" if residual else "<<NULL TYPE>>"
    attrs = (
        f'activation:"{activation}",data_format:"{layout}",dilations:[1,1],groups:1,'
        'padding_algorithm:"EXPLICIT",paddings:[1,1],split_channels:[],strides:[1,1]'
    )
    types = f"(tensor<{x}xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>, {res_type})"
    lines = [
        f'(%0) = "pd_op.data" () {{name:"x",shape:[{x.replace("x", ",")}]}} : () -> tensor<{x}xf32>',
        '(%1) = "builtin.parameter" () {parameter_name:"w"} : () -> tensor<4x3x3x3xf32>',
        '(%2) = "builtin.parameter" () {parameter_name:"b"} : () -> tensor<4xf32>',
        f'(%3) = "pd_op.data" () {{name:"r",shape:[{out.replace("x", ",")}]}} : () -> tensor<{out}xf32>',
        f'(%4, %5) = "pd_op.fused_conv2d_add_act" (%0, %1, %2, {res}) {{{attrs}}} : {types} -> '
        f"tensor<{out}xf32>, vec[]",
        f'(%6) = "pd_op.fetch" (%4) {{col:0,name:"out"}} : (tensor<{out}xf32>) -> tensor<{out}xf32>',
    ]
    return "{\n" + "\n".join(lines) + "\n}"


@pytest.mark.parametrize("activation", ["identity", "relu"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("residual", [False, True])
def test_paddles_fused_conv_is_canonical_ops_with_its_meaning(activation, layout, residual):
    from eqsat.frontend.paddle.nn import _fused_conv2d_add_act_meaning

    program = eqsat.parse_pir(_fused_conv_pir(activation, layout, residual))
    assert program.op_counts()["conv2d"] == 1 and "pd_op.fused_conv2d_add_act" not in program.op_counts()
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(4, 3, 3, 3)).astype(F32), rng.normal(size=4).astype(F32)
    program.param_values.update({"w": w, "b": b})
    inputs = [rng.normal(size=v.type.shape).astype(F32) for v in program.inputs]
    (got,) = lower(program)(*inputs)
    attrs = {"strides": [1, 1], "paddings": [1, 1], "dilations": [1, 1], "groups": 1, "data_format": layout}
    extra = [inputs[1]] if residual else []
    operands = "t,t,t,t" if residual else "t,t,t,n"
    (want,) = _fused_conv2d_add_act_meaning(
        inputs[0], w, b, *extra, activation=activation, operands=operands, **attrs
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_paddles_fused_conv_with_another_activation_stays_opaque():
    program = eqsat.parse_pir(_fused_conv_pir("swish", "NCHW", False))
    assert program.op_counts() == {"pd_op.fused_conv2d_add_act": 1}


class _Block(nn.Module):
    train: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = nn.relu(nn.BatchNorm(use_running_average=not self.train)(nn.Conv(8, (3, 3))(x)))
        y = nn.BatchNorm(use_running_average=not self.train)(nn.Conv(8, (3, 3))(y))
        return nn.relu(x + y)


class _ResNet(nn.Module):
    train: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = _Block(self.train)(_Block(self.train)(x))
        return nn.Dense(4)(x.mean(axis=(1, 2)))


@pytest.mark.slow
@pytest.mark.parametrize("train", [False, True], ids=["running-stats", "batch-stats"])
def test_resnet_gradients_through_fused_convs_are_as_accurate_as_jax_jit(train):
    """Convs with a bias, batch norm, relu: the gradient of eqsat.jit's forward (fused conv-bias-relu,
    batch norms folded or fused) is as close to the float64 gradient as jax.jit's, leaf by leaf. A bias
    before a batch norm over the batch has a gradient of exactly 0; both give rounding noise there, which
    is all a per-leaf relative error measures on such leaves."""
    net = _ResNet(train)
    rng = np.random.default_rng(0)
    x, y = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((4, 8, 8, 3), (4, 4)))
    variables = net.init(jax.random.key(0), x)
    stats = jax.tree_util.tree_map(lambda s: jnp.asarray(rng.uniform(0.5, 1.5, s.shape), s.dtype), variables)
    variables = {"params": variables["params"], "batch_stats": stats["batch_stats"]}

    def apply(variables, x):
        return net.apply(variables, x, mutable=["batch_stats"])[0] if train else net.apply(variables, x)

    def grads(forward, variables, x, y):
        return jax.grad(lambda v: jnp.mean((forward(v, x) - y) ** 2))(variables)["params"]

    fused = eqsat.jit(apply)
    got = jax.jit(lambda *a: grads(fused, *a))(variables, x, y)
    (result,) = fused.results.values()
    assert "conv2d_bias_act" in result.program.op_counts()
    want = jax.jit(lambda *a: grads(apply, *a))(variables, x, y)
    with jax.enable_x64(True):
        wide = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), (variables, x, y))
        ref = grads(apply, *wide)
    leaves = [jax.tree_util.tree_leaves(t) for t in (ref, want, got)]
    scale = np.sqrt(sum(float(np.sum(np.square(r))) for r in leaves[0]))
    for r, w, g in zip(*leaves, strict=True):
        r, w, g = (np.asarray(a, np.float64) for a in (r, w, g))
        assert np.linalg.norm(g - r) <= 4 * np.linalg.norm(w - r) + 1e-6 * scale


def _depthwise_block(layout):
    """A depthwise-separable block as MobileNets write it: depthwise 3x3, relu, pointwise 1x1."""
    rng = np.random.default_rng(0)
    c = 16
    shapes = {"NCHW": ((c, 1, 3, 3), (32, c, 1, 1)), "NHWC": ((3, 3, 1, c), (1, 1, c, 32))}[layout]
    dw, pw = (jnp.asarray(rng.normal(size=s) * 0.3, jnp.float32) for s in shapes)
    numbers = {"NCHW": ("NCHW", "OIHW", "NCHW"), "NHWC": ("NHWC", "HWIO", "NHWC")}[layout]

    def block(x):
        y = lax.conv_general_dilated(x, dw, (2, 2), "SAME", dimension_numbers=numbers, feature_group_count=c)
        return lax.conv_general_dilated(jax.nn.relu(y), pw, (1, 1), "VALID", dimension_numbers=numbers)

    x = rng.normal(size=(2, c, 20, 20) if layout == "NCHW" else (2, 20, 20, c))
    return block, jnp.asarray(x, jnp.float32)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_depthwise_conv_runs_as_shifted_multiply_adds_where_xla_runs_it_slowly(layout):
    """The CPU profile prices XLA:CPU's depthwise conv at its measured rate (50-100x below the same
    work as multiply-adds); the H100's does not, so there it stays XLA's conv."""
    block, x = _depthwise_block(layout)
    for device, want in (("cpu", "shifted"), ("h100", "direct")):
        fn = eqsat.jit(block, cost=f"roofline:{device}")
        np.testing.assert_allclose(fn(x), jax.jit(block)(x), rtol=1e-4, atol=1e-4)
        convs = [op for op in fn.result(x).program.ops if op.name.startswith("conv2d")]
        depthwise = [op for op in convs if op.attrs["groups"] > 1]
        assert [op.attrs["algorithm"] for op in depthwise] == [want]
    grad = jax.grad(lambda x: eqsat.jit(block, gradient="optimized")(x).sum())(x)
    np.testing.assert_allclose(grad, jax.grad(lambda x: block(x).sum())(x), rtol=1e-4, atol=1e-4)


def test_a_3x3_conv_at_a_1x1_map_reads_its_centre_tap_alone():
    """Taps that read only padding are left out of the shifted and im2col forms (and their cost)."""
    same = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilations": (1, 1), "layout": "NCHW"}
    assert [t.offset for t in taps((8, 64, 1, 1), (64, 64, 3, 3), **same)] == [(1, 1)]
    assert len(taps((8, 64, 2, 2), (64, 64, 3, 3), **same)) == 9
    types = [TensorType((8, 64, 1, 1), F32), TensorType((64, 64, 3, 3), F32)]
    attrs = {**same, "groups": 1}
    flops = {
        a: sum(k.flops for k in phases("conv2d", {**attrs, "algorithm": a}, types, types[0]))
        for a in ALGORITHMS
    }
    assert flops["shifted"] == flops["im2col"] == flops["direct"] / 9


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_every_conv_algorithm_computes_the_direct_conv(seed):
    """Groups (depthwise and channel multipliers included), strides, dilations, padding, both layouts,
    maps down to 1x1: the shifted and im2col lowerings agree with XLA's conv, and so do their
    gradients with respect to the data and the kernel."""
    rng = np.random.default_rng(seed)
    groups, per_group, out_per_group = (int(d) for d in rng.integers(1, 4, 3))
    per_group = 1 if seed % 3 == 0 else per_group
    layout = LAYOUTS[seed % 2]
    k = tuple(int(d) for d in rng.integers(1, 4, 2))
    dilations = tuple(int(d) for d in rng.integers(1, 3, 2))
    padding = tuple(int(d) for d in rng.integers(0, 3, 4))
    reach = [dilations[i] * (k[i] - 1) + 1 - padding[2 * i] - padding[2 * i + 1] for i in (0, 1)]
    hw = [max(int(rng.integers(1, 7)), r) for r in reach]
    c, o = groups * per_group, groups * out_per_group
    x = rng.normal(size=(2, c, *hw) if layout == "NCHW" else (2, *hw, c)).astype(np.float32)
    w = rng.normal(size=(o, per_group, *k) if layout == "NCHW" else (*k, per_group, o)).astype(np.float32)
    window = {"strides": tuple(int(d) for d in rng.integers(1, 3, 2)), "padding": padding}
    window |= {"dilations": dilations, "groups": groups, "layout": layout}
    conv = OPS["conv2d"].lower
    want = conv(x, w, **window, algorithm="direct")
    weights = rng.normal(size=want.shape).astype(np.float32)  # the gradient of a weighted sum

    def grads(algorithm):
        return jax.grad(lambda x, w: jnp.sum(conv(x, w, **window, algorithm=algorithm) * weights), (0, 1))(
            x, w
        )

    for algorithm in ALGORITHMS[1:]:
        got = conv(x, w, **window, algorithm=algorithm)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=algorithm)
        for g, r in zip(grads(algorithm), grads("direct"), strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4, err_msg=f"{algorithm} gradient")


def test_values_between_convs_keep_their_batch_dim_of_one():
    """The unit-dim pass squeezes elementwise ops, but not those between convs and poolings: XLA:CPU
    copies a conv's result reshaped to drop its batch dim (ResNet-18 at batch 1 ran 20% slower)."""
    from eqsat.unit_dims import drop_unit_dims

    b = Builder()
    x, w = b.input("x", (1, 4, 8, 8)), b.input("w", (4, 4, 3, 3))
    scale = b.input("s", (1, 4, 1, 1))
    y = b.relu(b.mul(b.conv2d(x, w, padding=(1, 1, 1, 1)), scale))
    program = drop_unit_dims(b.build(b.pool2d(y, kind="max", window=(2, 2), strides=(2, 2))))
    assert "reshape" not in program.op_counts()
    other = Builder()
    a, c = other.input("a", (1, 4, 8)), other.input("c", (1, 4, 8))
    assert "reshape" in drop_unit_dims(other.build(other.relu(other.add(a, c)))).op_counts()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_conv_of_empty_channels_is_priced_and_runs_in_every_formulation(algorithm, layout):
    """Found by the fuzzer: a 1-D conv of a (0, 0, 3) array divided by its zero output channels where
    the cost model priced the formulations, and reshaped by -1 (undefined for size 0) lowering them."""
    b = Builder()
    x = b.input("x", (0, 0, 1, 3) if layout == "NCHW" else (0, 1, 3, 0))
    w = b.input("w", (0, 0, 1, 3) if layout == "NCHW" else (1, 3, 0, 0))
    program = b.build(b.conv2d(x, w, padding=(0, 0, 1, 1), layout=layout, algorithm=algorithm))
    (conv,) = program.ops
    assert all(k.flops == 0 for k in phases(conv.name, conv.attrs, [x.type, w.type], conv.output.type))
    (out,) = lower(program)(np.zeros(x.type.shape, np.float32), np.zeros(w.type.shape, np.float32))
    assert out.shape == conv.output.type.shape


def test_eqsat_jit_of_an_empty_1d_conv_is_jax_jits():
    w = jnp.ones((0, 0, 3))

    def conv1d(x):
        return lax.conv_general_dilated(x, w, (1,), "SAME", dimension_numbers=("NCH", "OIH", "NCH"))

    same_as_jax_jit(conv1d, jnp.ones((0, 0, 3)))


def _dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_transforms_correlate_exactly(m):
    """In exact rational arithmetic A^T [(G g) * (B^T d)] is the correlation of d with g, for any d, g."""
    at, g, bt = winograd.transforms(m, 3)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d = [Fraction(int(v)) for v in rng.integers(-9, 10, m + 2)]
        k = [Fraction(int(v)) for v in rng.integers(-9, 10, 3)]
        cells = [_dot(row, k) * _dot(brow, d) for row, brow in zip(g, bt, strict=True)]
        assert [_dot(row, cells) for row in at] == [_dot(d[i : i + 3], k) for i in range(m)]


def _fused_conv_and_grads(algorithm, x, w, bias, weights, window):
    """conv + bias + relu by ``algorithm``, and the gradients of its sum weighted by ``weights``."""

    def run(x, w):
        return OPS["conv2d_bias_act"].lower(x, w, bias, act="relu", **window, algorithm=algorithm)

    return run(x, w), jax.grad(lambda x, w: jnp.sum(run(x, w) * weights), (0, 1))(x, w)


@pytest.mark.parametrize("stacked", [True, False])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algorithm", WINOGRAD)
def test_winograd_computes_the_direct_conv(algorithm, layout, stacked, monkeypatch):
    """Every padding and map size (down to one output, maps not a whole number of tiles), with a bias
    and relu in the fused op, the products batched or one per cell: values and gradients as XLA's conv
    (F(4x4, 3x3) to its looser bound)."""
    if not stacked:
        monkeypatch.setattr(winograd, "STACKED_MAX_BYTES", 0)
    rng = np.random.default_rng(len(algorithm) + len(layout))
    tol = 1e-5 if algorithm == "winograd-2x2" else 1e-4
    for _ in range(6):
        padding = tuple(int(d) for d in rng.integers(0, 3, 4))
        hw = [max(int(rng.integers(1, 12)), 3 - padding[2 * i] - padding[2 * i + 1], 1) for i in (0, 1)]
        c, o = (int(d) for d in rng.integers(1, 9, 2))
        x = rng.normal(size=(2, c, *hw) if layout == "NCHW" else (2, *hw, c)).astype(np.float32)
        w = rng.normal(size=(o, c, 3, 3) if layout == "NCHW" else (3, 3, c, o)).astype(np.float32)
        bias = rng.normal(size=(o,)).astype(np.float32)
        window = {"strides": (1, 1), "padding": padding, "dilations": (1, 1), "groups": 1, "layout": layout}
        out = [hw[i] + padding[2 * i] + padding[2 * i + 1] - 2 for i in (0, 1)]
        weights = rng.normal(size=(2, o, *out) if layout == "NCHW" else (2, *out, o)).astype(np.float32)
        want, want_grads = _fused_conv_and_grads("direct", x, w, bias, weights, window)
        got, grads = _fused_conv_and_grads(algorithm, x, w, bias, weights, window)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        for g, r in zip(grads, want_grads, strict=True):
            np.testing.assert_allclose(g, r, rtol=10 * tol, atol=10 * tol)


def test_winograd_is_refused_for_a_conv_it_does_not_compute():
    b = Builder()
    x, w = b.input("x", (1, 4, 8, 8)), b.input("w", (4, 4, 3, 3))
    with pytest.raises(
        eqsat.ShapeError, match="winograd-2x2 computes stride-1, undilated, one-group 3x3 convs"
    ):
        b.conv2d(x, w, strides=(2, 2), padding=(1, 1, 1, 1), algorithm="winograd-2x2")


def test_shifts_are_refused_for_a_pool_that_is_not_a_max():
    b = Builder()
    x = b.input("x", (1, 4, 8, 8))
    with pytest.raises(eqsat.ShapeError, match="the shifted algorithm computes a max pool, not avg"):
        b.pool2d(x, kind="avg", window=(2, 2), strides=(2, 2), algorithm="shifted")
    shifted = b.pool2d(
        x, kind="max", window=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), algorithm="shifted"
    )
    program = b.build(shifted)
    data = np.random.default_rng(0).normal(size=(1, 4, 8, 8)).astype(np.float32)
    want = lax.reduce_window(
        data, -np.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), [(0, 0), (0, 0), (1, 1), (1, 1)]
    )
    np.testing.assert_array_equal(jax.jit(lower(program))(data)[0], want)


@pytest.mark.parametrize("algorithm", WINOGRAD)
def test_a_conv_extracted_as_winograd_runs_as_the_program(algorithm):
    """F(2x2, 3x3) is a default rule; F(4x4, 3x3), which rounds about 4x more than the direct sum at
    real channel counts, is chosen in by name. A cost that prefers either gets it, validated."""
    default = {r.name for r in resolve(["default"])}
    assert ("conv-" + algorithm in default) == (algorithm == "winograd-2x2")
    b = Builder()
    x, w = b.input("x", (1, 12, 12, 8)), b.input("w", (3, 3, 8, 8))
    program = b.build(b.relu(b.conv2d(x, w, padding=(1, 1, 1, 1), layout="NHWC")))

    def cost(op, attrs, ins, out):
        return 0.1 if attrs.get("algorithm") == algorithm else 1.0

    result = eqsat.optimize(program, ["default", "conv-" + algorithm], cost=cost, verify=True)
    assert [op.attrs["algorithm"] for op in result.program.ops if op.name.startswith("conv")] == [algorithm]


def test_a_winograd_conv_of_a_bad_kernel_rank_is_the_shape_rules_error():
    b = Builder()
    x, w = b.input("x", (1, 4, 8, 8)), b.input("w", (4, 4, 3))
    with pytest.raises(eqsat.ShapeError, match="conv2d needs rank-4 data and kernel"):
        b.conv2d(x, w, padding=(1, 1, 1, 1), algorithm="winograd-2x2")
