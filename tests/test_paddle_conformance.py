"""Paddle's operators checked against Paddle itself: every ``pd_op`` the PIR frontend maps (to a canonical
op or to an opaque JAX meaning), with the attributes that change its meaning, is built with Paddle,
saved as an inference model (``paddle.jit.save``, as users save them), loaded by eqsat and run before
and after optimization; the outputs must be Paddle's own. Ops that only Paddle's fusion passes emit are
covered by the fixture dumps after those passes, compared with Paddle's outputs in tests/test_paddle.py.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import eqsat
from eqsat.frontend.pir import HANDLERS
from eqsat.lowering import OPAQUE_LOWERINGS, lower

paddle = pytest.importorskip("paddle")
F = paddle.nn.functional

DUMPS = Path(__file__).resolve().parent / "data" / "paddle" / "dumps"
# Ops only Paddle's own passes emit: covered by the fixture dumps after those passes (test_paddle.py
# compares them with Paddle's outputs, before and after optimization).
FROM_PASSES = ("fc", "multihead_matmul", "fused_bias_residual_layernorm", "fused_conv2d_add_act")
# Structural ops every saved program holds (inputs, outputs, constants) and the spelling of a weight
# in Paddle 2's PIR (Paddle 3 writes builtin.parameter): covered by every case or not emitted.
STRUCTURAL = ("data", "fetch", "full", "full_int_array", "parameter")


@dataclass(frozen=True)
class Case:
    """A one-op Paddle program: ``fn`` over inputs ``(shape, dtype, kind)``; kind ``normal``,
    ``positive``, ``nonzero`` (integers without 0) or ``ids`` (indices below 5)."""

    label: str
    fn: Callable[..., Any]
    inputs: tuple[tuple[tuple[int, ...], str, str], ...]


def _x(*shape: int, dtype: str = "float32", kind: str = "normal") -> tuple[tuple[int, ...], str, str]:
    return shape, dtype, kind


X, Y = _x(2, 4), _x(2, 4)
POS = _x(2, 4, kind="positive")
INTS = (_x(2, 4, dtype="int32", kind="nonzero"), _x(2, 4, dtype="int32", kind="nonzero"))
IMAGE = _x(1, 2, 7, 7)


def _elementwise(name: str, fn: Callable[..., Any], *inputs: tuple[tuple[int, ...], str, str]) -> Case:
    return Case(name, fn, inputs or (X,))


CASES = [
    # elementwise, unary
    *(
        _elementwise(name, fn)
        for name, fn in {
            "relu": F.relu,
            "exp": paddle.exp,
            "tanh": paddle.tanh,
            "sigmoid": F.sigmoid,
            "silu": F.silu,
            "gelu-erf": F.gelu,
            "gelu-tanh": lambda x: F.gelu(x, approximate=True),
            "square": paddle.square,
            "abs": paddle.abs,
            "ceil": paddle.ceil,
            "floor": paddle.floor,
            "sin": paddle.sin,
            "cos": paddle.cos,
            "tan": paddle.tan,
            "erf": paddle.erf,
            "expm1": paddle.expm1,
            "reciprocal": paddle.reciprocal,
            "sign": paddle.sign,
            "isnan": paddle.isnan,
            "isinf": paddle.isinf,
            "isfinite": paddle.isfinite,
            "hardswish": F.hardswish,
            "hardsigmoid": F.hardsigmoid,
            "hardsigmoid-slope": lambda x: F.hardsigmoid(x * 4, slope=0.2, offset=0.4),
            "relu6": lambda x: F.relu6(x * 4),
            "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.7),
            "swish": F.swish,
            "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
            "clip": lambda x: paddle.clip(x, -0.5, 0.5),
            "pow-scalar": lambda x: paddle.pow(x, 3.0),
            "pow-fractional": lambda x: paddle.pow(paddle.abs(x) + 0.5, 1.7),
            "pow-int": lambda x: paddle.pow((x * 4).astype("int32"), 3),
            "scale-after": lambda x: paddle.scale(x, 2.0, 1.0),
            "scale-before": lambda x: paddle.scale(x, 2.0, 1.0, bias_after_scale=False),
            "scale-int": lambda x: paddle.scale((x * 4).astype("int64"), 3.0, -2.0),
            "scale-int-before": lambda x: paddle.scale(
                (x * 4).astype("int32"), 2.0, 5.0, bias_after_scale=False
            ),
            "cast-int": lambda x: (x * 4).astype("int32"),
            "full_like": lambda x: paddle.full_like(x, 2.5),
            # Paddle's JSON writes an infinite fill as {"VD": "-INF"}, not a number
            "full-minus-inf": lambda x: paddle.where(x > 0, x, paddle.full([1], float("-inf"))),
            "full-inf": lambda x: paddle.minimum(x, paddle.full([1], float("inf"))),
            "cumsum": lambda x: paddle.cumsum(x, axis=1),
            "cumsum-flattened": paddle.cumsum,
            "cumsum-exclusive-reversed": lambda x: paddle._C_ops.cumsum(x, 0, False, True, True),
            "cumsum-exclusive": lambda x: paddle._C_ops.cumsum(x, -1, False, True, False),
            "cumsum-int": lambda x: paddle.cumsum((x * 4).astype("int32"), axis=0),
            "cumprod": lambda x: paddle.cumprod(x, dim=1),
            "cumprod-exclusive-reversed": lambda x: paddle._C_ops.cumprod(x, 1, True, True),
            "argmax": lambda x: paddle.argmax(x, axis=1),
            "argmax-keepdim": lambda x: paddle.argmax(x, axis=0, keepdim=True),
            "argmax-flattened": paddle.argmax,
            "argmax-flattened-keepdim": lambda x: paddle.argmax(x, keepdim=True),
            "argmax-int32": lambda x: paddle.argmax(x, axis=-1, dtype="int32"),
            "argmin": lambda x: paddle.argmin(x, axis=0),
            "argmin-flattened-keepdim": lambda x: paddle.argmin(x, keepdim=True),
            "topk": lambda x: paddle.topk(x, 2),
            "topk-axis0": lambda x: paddle.topk(x, 1, axis=0),
            "topk-smallest": lambda x: paddle.topk(x, 2, axis=1, largest=False),
            "topk-of-softmax": lambda x: paddle.topk(paddle.nn.functional.softmax(x), 2)[1],
            "logical_not": lambda x: paddle.logical_not(x > 0),
        }.items()
    ),
    *(_elementwise(name, fn, POS) for name, fn in {"log": paddle.log, "sqrt": paddle.sqrt}.items()),
    *(_elementwise(name, fn, POS) for name, fn in {"rsqrt": paddle.rsqrt, "log1p": paddle.log1p}.items()),
    # elementwise, binary (floats; integer division and remainder as Paddle rounds them)
    *(
        _elementwise(name, fn, X, Y)
        for name, fn in {
            "add": paddle.add,
            "subtract": paddle.subtract,
            "multiply": paddle.multiply,
            "divide": paddle.divide,
            "maximum": paddle.maximum,
            "minimum": paddle.minimum,
            "elementwise_pow": lambda x, y: paddle.pow(paddle.abs(x) + 0.5, y),
            "floor_divide": paddle.floor_divide,
            "remainder": paddle.remainder,
            "equal": paddle.equal,
            "not_equal": paddle.not_equal,
            "less_than": paddle.less_than,
            "less_equal": paddle.less_equal,
            "greater_than": paddle.greater_than,
            "greater_equal": paddle.greater_equal,
            "logical_and": lambda x, y: paddle.logical_and(x > 0, y > 0),
            "logical_or": lambda x, y: paddle.logical_or(x > 0, y > 0),
            "where": lambda x, y: paddle.where(x > y, x, y),
            "add-broadcast": lambda x, y: x + y[0],
        }.items()
    ),
    *(
        _elementwise(f"{name}-int", fn, *INTS)
        for name, fn in {
            "divide": paddle.divide,
            "floor_divide": paddle.floor_divide,
            "remainder": paddle.remainder,
            "bitwise_and": paddle.bitwise_and,
            "bitwise_or": paddle.bitwise_or,
            "bitwise_not": lambda x, y: paddle.bitwise_not(x) + y,
        }.items()
    ),
    *(
        _elementwise(f"{name}-bool", fn, X, Y)
        for name, fn in {
            "bitwise_and": lambda x, y: paddle.bitwise_and(x > 0, y > 0),
            "bitwise_or": lambda x, y: paddle.bitwise_or(x > 0, y > 0),
            "bitwise_not": lambda x, y: paddle.bitwise_not(x > y),
        }.items()
    ),
    # layout
    Case("reshape", lambda x: paddle.reshape(x, [4, -1]), (X,)),
    Case("assign", lambda x: paddle.assign(x) * 2.0, (X,)),
    Case("diag", paddle.diag, (_x(5),)),
    Case("diag-product", lambda x, v: paddle.matmul(x, paddle.diag(v)), (_x(3, 5), _x(5))),
    Case("diag-offset-padded", lambda v: paddle.diag(v, offset=-1, padding_value=2.0), (_x(4),)),
    Case("diag-of-matrix", lambda x: paddle.diag(x, offset=1), (_x(4, 5),)),
    Case("diag-of-matrix-main", paddle.diag, (_x(5, 3),)),
    Case("diag-of-diag", lambda v: paddle.diag(paddle.diag(v)), (_x(5),)),
    Case("diag_embed", paddle.diag_embed, (_x(2, 3, 4),)),
    Case("diag_embed-axes", lambda x: paddle.diag_embed(x, offset=1, dim1=0, dim2=2), (_x(3, 4),)),
    Case("reshape-zero", lambda x: paddle.reshape(x, [0, 2, 2]), (X,)),
    Case("transpose", lambda x: paddle.transpose(x, [2, 0, 1]), (_x(2, 3, 4),)),
    Case("expand", lambda x: paddle.expand(x, [3, 2, 4]), (X,)),
    Case("flatten", lambda x: paddle.flatten(x, 1), (_x(2, 3, 4),)),
    Case("squeeze", lambda x: paddle.squeeze(x, axis=1), (_x(2, 1, 4),)),
    Case("unsqueeze", lambda x: paddle.unsqueeze(x, [0, 2]), (X,)),
    Case("concat", lambda x, y: paddle.concat([x, y], axis=1), (X, Y)),
    Case("split_with_num", lambda x: paddle.split(x, 2, axis=1), (X,)),
    Case("split", lambda x: paddle.split(x, [1, 3], axis=1), (X,)),
    Case("slice", lambda x: x[:, 1:3], (X,)),
    # control flow: an if on a tensor, and one whose condition no input meets (its else branch); a while
    Case(
        "if",
        lambda x: paddle.static.nn.cond(paddle.mean(x) > 0, lambda: x * 2.0, lambda: paddle.tanh(x)),
        (X,),
    ),
    Case(
        "if-else",
        lambda x: paddle.static.nn.cond(paddle.mean(x) > 9, lambda: x * 2.0, lambda: paddle.tanh(x)),
        (X,),
    ),
    Case(
        "while",
        lambda x: paddle.static.nn.while_loop(
            lambda i, y: i < 3, lambda i, y: [i + 1, y * 0.5 + 1.0], [paddle.zeros([1], "int64"), x]
        )[1],
        (X,),
    ),
    Case("stack", lambda x, y: paddle.stack([x, y], axis=1), (X, Y)),
    Case("roll", lambda x: paddle.roll(x, shifts=[1, -2], axis=[0, 1]), (X,)),
    Case("expand_as", lambda x, y: x.expand_as(y), (_x(1, 4), _x(3, 4))),
    Case("roll-flat", lambda x: paddle.roll(x, shifts=3), (X,)),
    Case("triu", lambda x: paddle.triu(x, 1), (_x(3, 4),)),
    Case("tril", lambda x: paddle.tril(x, -1), (_x(2, 3, 3),)),
    Case("conv2d_transpose", lambda x, w: F.conv2d_transpose(x, w, stride=2), (IMAGE, _x(2, 3, 2, 2))),
    Case(
        "conv2d_transpose-padded",
        lambda x, w: F.conv2d_transpose(x, w, stride=2, padding=1, output_padding=1, dilation=1),
        (IMAGE, _x(2, 4, 3, 3)),
    ),
    Case(
        "conv2d_transpose-groups-dilation",
        lambda x, w: F.conv2d_transpose(x, w, stride=(2, 1), padding=[1, 0], dilation=2, groups=2),
        (IMAGE, _x(2, 3, 3, 2)),
    ),
    Case(
        "conv2d_transpose-output-size",
        lambda x, w: F.conv2d_transpose(x, w, stride=2, padding=1, output_size=[14, 14]),
        (IMAGE, _x(2, 3, 3, 3)),
    ),
    Case(  # PP-YOLOE's anchor grid: a meshgrid of aranges, stacked
        "meshgrid",
        lambda x, y: paddle.stack(paddle.meshgrid(x.flatten(), y.flatten()), axis=-1),
        (_x(3), _x(2, 2)),
    ),
    Case("arange", lambda x: x + paddle.arange(0, 8, 2).astype("float32"), (X,)),
    Case(
        "embedding",
        lambda ids, w: F.embedding(ids, w, padding_idx=0),
        (_x(3, dtype="int64", kind="ids"), _x(5, 6)),
    ),
    # reductions and softmax
    Case("sum", lambda x: paddle.sum(x, axis=1), (X,)),
    Case("sum-all", lambda x: paddle.sum(x), (X,)),
    Case("mean-keepdim", lambda x: paddle.mean(x, axis=1, keepdim=True), (X,)),
    Case("max", lambda x: paddle.max(x, axis=0), (X,)),
    Case("softmax", lambda x: F.softmax(x, axis=-1), (X,)),
    Case("softmax-axis0", lambda x: F.softmax(x, axis=0), (X,)),
    # matmul
    Case("matmul", paddle.matmul, (_x(2, 3, 5), _x(5, 4))),
    # 1-D operands as numpy's (PP-PicoDet's F.linear(softmax(x), project) with a vector project)
    Case("matmul-vector-y", paddle.matmul, (_x(6, 8), _x(8))),
    Case("matmul-vector-x", lambda x, y: paddle.matmul(x, y, transpose_x=True), (_x(3), _x(2, 3, 4))),
    Case("matmul-vectors", paddle.matmul, (_x(5), _x(5))),
    Case("bmm", paddle.bmm, (_x(2, 3, 5), _x(2, 5, 4))),
    # strided slices (Swin-T's patch merging x[:, 0::2, 0::2, :], RoFormer's x[..., 0::2])
    Case("strided_slice", lambda x: x[:, 0::2, 1::2, :], (_x(2, 6, 5, 3),)),
    Case("strided_slice-reversed", lambda x: x[:, ::-2], (_x(2, 7),)),
    Case(
        "strided_slice-op", lambda x: paddle.strided_slice(x, [0, 1], [1, -1], [2, 0], [1, -2]), (_x(3, 6),)
    ),
    Case("matmul-transposed", lambda x, y: paddle.matmul(x, y, True, True), (_x(2, 5, 3), _x(4, 5))),
    Case("matmul-transpose_y", lambda x, y: paddle.matmul(x, y, transpose_y=True), (_x(3, 5), _x(4, 5))),
    # normalization, dropout
    Case("layer_norm", lambda x, w, b: F.layer_norm(x, [4], w, b), (_x(2, 3, 4), _x(4), _x(4))),
    Case(  # PaddleNLP's T5LayerNorm: pow, a kept-dims mean, + eps (a scale), the weight first
        "t5-rms-norm",
        lambda x, w: w * (x * paddle.rsqrt(paddle.pow(x.astype("float32"), 2).mean(-1, keepdim=True) + 1e-6)),
        (_x(2, 3, 16), _x(16)),
    ),
    Case("layer_norm-two-axes", lambda x: F.layer_norm(x, [3, 4]), (_x(2, 3, 4),)),
    Case(
        "batch_norm",
        lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False, epsilon=1e-3),
        (IMAGE, _x(2), _x(2, kind="positive"), _x(2), _x(2)),
    ),
    Case("dropout-upscale", lambda x: F.dropout(x, 0.3, training=False), (X,)),
    Case("dropout-downscale", lambda x: F.dropout(x, 0.3, training=False, mode="downscale_in_infer"), (X,)),
    # convolution and pooling
    Case("conv2d", lambda x, w: F.conv2d(x, w, padding=1), (IMAGE, _x(3, 2, 3, 3))),
    Case(
        "conv2d-same-stride", lambda x, w: F.conv2d(x, w, padding="SAME", stride=2), (IMAGE, _x(3, 2, 3, 3))
    ),
    Case(
        "conv2d-valid-dilated",
        lambda x, w: F.conv2d(x, w, padding="VALID", dilation=2),
        (IMAGE, _x(3, 2, 3, 3)),
    ),
    Case(
        "conv2d-nhwc",
        lambda x, w: F.conv2d(x, w, padding=1, data_format="NHWC"),
        (_x(1, 7, 7, 2), _x(3, 2, 3, 3)),
    ),
    Case("depthwise_conv2d", lambda x, w: F.conv2d(x, w, groups=2), (IMAGE, _x(2, 1, 3, 3))),
    Case("pool2d-max", lambda x: F.max_pool2d(x, 2), (IMAGE,)),
    Case("pool2d-avg-inclusive", lambda x: F.avg_pool2d(x, 3, 2, 1, exclusive=False), (IMAGE,)),
    Case("pool2d-avg-exclusive", lambda x: F.avg_pool2d(x, 3, 2, 1), (IMAGE,)),
    Case("pool2d-ceil", lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), (IMAGE,)),
    Case("pool2d-global", lambda x: F.adaptive_avg_pool2d(x, 1), (IMAGE,)),
    Case("swiglu", lambda x, y: F.swiglu(x, y), (X, Y)),
    Case("elu", lambda x: F.elu(x, 0.7), (X,)),
    Case("mish", F.mish, (X,)),
    Case("softplus", lambda x: F.softplus(x * 8, beta=2.0, threshold=5.0), (X,)),
    Case("prelu-channel", lambda x, a: F.prelu(x, a), (IMAGE, _x(2))),
    Case("prelu-all", lambda x, a: F.prelu(x, a), (IMAGE, _x(1))),
    Case("pad3d-constant", lambda x: F.pad(x, [1, 2, 0, 1], value=0.5), (IMAGE,)),
    Case("pad3d-reflect", lambda x: F.pad(x, [1, 1, 2, 0], mode="reflect"), (IMAGE,)),
    Case("pad3d-replicate", lambda x: F.pad(x, [2, 0, 1, 1], mode="replicate"), (IMAGE,)),
    Case("group_norm", lambda x, w, b: F.group_norm(x, 2, weight=w, bias=b), (_x(2, 4, 5, 5), _x(4), _x(4))),
    Case(
        "instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (_x(2, 4, 5, 5), _x(4), _x(4))
    ),
    Case("pool2d-adaptive-uneven", lambda x: F.adaptive_avg_pool2d(x, 3), (IMAGE,)),
    Case("max_pool2d_with_index", lambda x: F.adaptive_max_pool2d(x, 3), (IMAGE,)),
    Case("pool2d-adaptive-keep-width", lambda x: F.adaptive_avg_pool2d(x, (1, None)), (IMAGE,)),
    Case("pool2d-adaptive-uneven-keep", lambda x: F.adaptive_avg_pool2d(x, (None, 3)), (IMAGE,)),
    Case("max_pool2d_with_index-keep", lambda x: F.adaptive_max_pool2d(x, (2, None)), (IMAGE,)),
    Case("nearest_interp", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (IMAGE,)),
    # 1-D and 3-D resizes (PP-MobileSeg's linear_interp)
    Case(
        "linear_interp",
        lambda x: F.interpolate(x, size=[11], mode="linear", data_format="NCW"),
        (_x(1, 3, 7),),
    ),
    Case(
        "linear_interp-corners",
        lambda x: F.interpolate(x, scale_factor=1.5, mode="linear", align_corners=True, data_format="NCW"),
        (_x(2, 3, 6),),
    ),
    Case(
        "trilinear_interp",
        lambda x: F.interpolate(x, size=[3, 5, 4], mode="trilinear", data_format="NCDHW"),
        (_x(1, 2, 2, 3, 3),),
    ),
    Case("nearest_interp-size", lambda x: F.interpolate(x, size=[5, 10], mode="nearest"), (IMAGE,)),
    Case("bilinear_interp", lambda x: F.interpolate(x, size=[9, 4], mode="bilinear"), (IMAGE,)),
    Case(
        "bilinear_interp-corners",
        lambda x: F.interpolate(x, size=[9, 11], mode="bilinear", align_corners=True),
        (IMAGE,),
    ),
    Case(
        "bilinear_interp-mode1",
        lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_mode=1),
        (IMAGE,),
    ),
    Case(  # PaddleSeg's resize to the input's size: out_size from shape64 -> slice -> cast
        "bilinear_interp-size-of-a-tensor",
        lambda x, y: F.interpolate(x, size=paddle.shape(y)[2:], mode="bilinear"),
        (IMAGE, _x(1, 2, 9, 5)),
    ),
    Case(  # a size list of a shape piece and a number: size_tensor
        "nearest_interp-size-list",
        lambda x, y: F.interpolate(x, size=[paddle.shape(y)[2], 4], mode="nearest"),
        (IMAGE, _x(1, 2, 9, 5)),
    ),
    Case(
        "bilinear_interp-scale-tensor",
        lambda x: F.interpolate(x, scale_factor=paddle.to_tensor([1.5, 2.0]), mode="bilinear"),
        (IMAGE,),
    ),
    Case("shape64-full_with_tensor", lambda x: paddle.full(paddle.shape(x), 2.0) + x, (X,)),
    Case("shape", lambda x: paddle.full(paddle._C_ops.shape(x), 2.0) + x, (X,)),
    Case(  # what `1 / x` becomes in to_static code with a dynamic batch
        "full_batch_size_like",
        lambda x: (
            paddle._C_ops.full_batch_size_like(x, [-1, 1, 3], paddle.float32, 1.5, 0, 0, paddle.CPUPlace())
            / x[:, :1, None]
        ),
        (_x(3, 4, 3),),
    ),
    Case("rnn-lstm", lambda x: paddle.nn.LSTM(4, 6, num_layers=2)(x), (_x(2, 3, 4),)),
    Case("rnn-gru-bidirectional", lambda x: paddle.nn.GRU(4, 5, direction="bidirect")(x), (_x(2, 3, 4),)),
    Case("rnn-simple", lambda x: paddle.nn.SimpleRNN(4, 5)(x), (_x(2, 3, 4),)),
    # sequences of lengths 1 to 5 in a batch padded to 5 (LAC's BiGRU): a padded step keeps the state
    Case(
        "rnn-gru-bidirectional-lengths",
        lambda x, n: paddle.nn.GRU(4, 5, direction="bidirect")(x, sequence_length=n + 1),
        (_x(3, 5, 4), _x(3, dtype="int64", kind="ids")),
    ),
    *(
        Case(
            f"viterbi_decode{'' if tags else '-without-bos-eos'}",
            lambda x, t, n, tags=tags: paddle.text.viterbi_decode(x, t, n + 1, tags),
            (_x(3, 5, 4), _x(4, 4), _x(3, dtype="int64", kind="ids")),
        )
        for tags in (True, False)
    ),
    Case(
        "rnn-lstm-lengths",
        lambda x, n: paddle.nn.LSTM(4, 3, num_layers=2)(x, sequence_length=n + 1),
        (_x(3, 5, 4), _x(3, dtype="int32", kind="ids")),
    ),
    Case(
        "fused_rms_norm",
        lambda x, w, b: paddle.incubate.nn.functional.fused_rms_norm(x, w, b, 1e-6, 1)[0],
        (_x(2, 3, 4), _x(12), _x(12)),
    ),
    Case(
        "batch_norm-not-inplace",
        lambda x, m, v, w, b: paddle._C_ops.batch_norm(x, m, v, w, b, True, 0.9, 1e-3, "NCHW", False, False)[
            0
        ],
        (IMAGE, _x(2), _x(2, kind="positive"), _x(2), _x(2)),
    ),
]
# Mapped ops no case can build: Paddle 3.3.1's pd_op.rms_norm has other operands than the fused
# normalization eqsat reads under that name (Paddle 3.0's, today fused_rms_norm_quant, checked above)
# and no CPU kernel to check it with.
UNCHECKABLE = ("rms_norm",)


def _data(spec: tuple[tuple[int, ...], str, str], rng: np.random.Generator) -> np.ndarray:
    shape, dtype, kind = spec
    if kind == "ids":
        return rng.integers(0, 5, shape).astype(dtype)
    if kind == "nonzero":
        return (rng.integers(1, 9, shape) * rng.choice([-1, 1], shape)).astype(dtype)
    data = rng.normal(size=shape)
    return (np.abs(data) + 0.1 if kind == "positive" else data).astype(dtype)


@cache
def _saved(label: str, root: Path) -> tuple[Path, tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The case built and run by Paddle in static mode and saved as an inference model (its .json
    path), its inputs, and Paddle's outputs for them."""
    case = next(c for c in CASES if c.label == label)
    rng = np.random.default_rng(len(label))
    inputs = tuple(_data(spec, rng) for spec in case.inputs)
    main, startup = paddle.static.Program(), paddle.static.Program()
    paddle.enable_static()
    try:
        with warnings.catch_warnings(), paddle.static.program_guard(main, startup):
            warnings.simplefilter("ignore")
            feeds = [paddle.static.data(f"in{i}", s, d) for i, (s, d, _) in enumerate(case.inputs)]
            outs = case.fn(*feeds)
            outs = paddle.utils.flatten(outs)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            want = exe.run(
                main, feed={f.name: a for f, a in zip(feeds, inputs, strict=True)}, fetch_list=outs
            )
            paddle.static.save_inference_model(str(root / label), feeds, outs, exe)
    finally:
        paddle.disable_static()
    return root / f"{label}.json", inputs, tuple(np.asarray(o) for o in want)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("paddle")
    return lambda label: _saved(label, root)


# Results whose width Paddle sets from the data (a Viterbi path has as many columns as the longest
# length): here they have the padded length, zeros past Paddle's columns (crf.py's docstring says so).
PADDED = ("viterbi_decode", "viterbi_decode-without-bos-eos")


def _trimmed(label: str, got: Any, want: np.ndarray) -> Any:
    """``got`` cut to ``want``'s width where the case is one of ``PADDED``, the cut part all zeros."""
    got = np.asarray(got)
    if label not in PADDED or got.shape == want.shape:
        return got
    width = want.shape[-1]
    assert got.shape[:-1] == want.shape[:-1] and not got[..., width:].any()
    return got[..., :width]


def _agree(got: Any, want: np.ndarray) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("label", [c.label for c in CASES])
def test_paddle_op_runs_as_paddle_runs_it(label, saved):
    path, inputs, want = saved(label)
    params = path.with_suffix(".pdiparams")
    program = eqsat.load(path, params=params if params.exists() else None)
    for fn in (lower(program), eqsat.optimize(program).fn):
        got = fn(*inputs)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _agree(_trimmed(label, g, w), w)


def test_t5s_rms_norm_as_paddlenlp_writes_it_is_an_rms_norm(saved):
    path, inputs, want = saved("t5-rms-norm")
    result = eqsat.optimize(eqsat.load(path))
    assert result.program.op_counts() == {"rms_norm": 1}, result.program.op_counts()
    _agree(result.fn(*inputs)[0], want[0])


def _ops_in(path: Path) -> set[str]:
    return {f"pd_op.{name}" for name in re.findall(r'"1\.([a-z_0-9]+)"', path.read_text())}


def test_every_mapped_paddle_op_is_checked_against_paddle(saved):
    """The ops the frontend maps (HANDLERS) or gives a meaning (opaque lowerings) are exactly the ops
    the cases above, or the fixtures after Paddle's passes, check against Paddle."""
    mapped = {"pd_op." + n[len("pd.") :] for n in HANDLERS if n.startswith("pd.")}
    mapped |= {n for n in OPAQUE_LOWERINGS if n.startswith("pd_op.")}
    covered = set().union(*(_ops_in(saved(c.label)[0]) for c in CASES))
    passes = set().union(*(_ops_in_dump(p) for p in DUMPS.glob("*.passes.pir")))
    assert {f"pd_op.{n}" for n in FROM_PASSES} <= passes
    covered |= {f"pd_op.{n}" for n in (*FROM_PASSES, *STRUCTURAL, *UNCHECKABLE)}
    assert mapped - covered == set(), "mapped but never checked against Paddle"


def _ops_in_dump(path: Path) -> set[str]:
    return set(re.findall(r'"(pd_op\.[a-z_0-9]+)"', path.read_text()))


def test_strided_slices_of_a_dynamic_batch_have_their_shapes_inferred(tmp_path):
    """Swin-T's patch merging saved with a dynamic batch: Paddle leaves the strided slices' shapes
    dynamic (-1), which a concat after them cannot check; their meaning gives the shapes."""
    data = np.random.default_rng(0).normal(size=(2, 6, 6, 3)).astype("float32")
    main, startup = paddle.static.Program(), paddle.static.Program()
    paddle.enable_static()
    try:
        with warnings.catch_warnings(), paddle.static.program_guard(main, startup):
            warnings.simplefilter("ignore")
            x = paddle.static.data("x", [-1, 6, 6, 3], "float32")
            y = paddle.concat([x[:, 0::2, 1::2, :], x[:, 1::2, 0::2, :]], axis=-1) * 2.0
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            (want,) = exe.run(main, feed={"x": data}, fetch_list=[y])
            paddle.static.save_inference_model(str(tmp_path / "merge"), [x], [y], exe)
    finally:
        paddle.disable_static()
    program = eqsat.load(tmp_path / "merge.json", shapes={"x": data.shape})
    (got,) = lower(program)(data)
    _agree(got, want)
