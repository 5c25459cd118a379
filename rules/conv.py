"""Convolutions: batch norm folded into the conv before it, a bias moved into the batch norm after it,
and a 1x1 convolution as a matmul (Paddle Lite's conv_bn fuser, TVM's FoldScaleAxis, TASO's rules).
Off by default, for proofs (TASO's conv rules): convolution is linear in its data and in its kernel,
and convolutions concatenate along the batch, along output channels, along input channels (summed),
and as groups.

Each form is an alternative in the e-graph; the cost model decides. Folding computes the conv's new
weights ``w * scale / sqrt(var + eps)`` and bias from the weights and statistics, which must be
leaves (parameters or constants: then XLA computes them once, at compile time), and float32/float64
(half-precision weights would be rescaled in half precision).
"""

from __future__ import annotations

from typing import Any

from eqsat.egglog_text import CONSTANT_VALUE, CONSTANT_WEIGHT
from eqsat.ir import TensorType
from eqsat.ops.conv import ALGORITHMS, CONV_AXES, LAYOUTS, POOL_ALGORITHMS, WINOGRAD

from .base import MultiVariant, Rule, Variant, both_ways, rand_shape
from .ranges import RANGES, Magnitude, in_range, shift_moderate
from .terms import (
    SCALAR,
    Add,
    BatchNorm,
    Concat,
    Conv2d,
    Conv2dBiasAct,
    Expr,
    Fact,
    Full,
    Matmul,
    Mul,
    Neg,
    Operand,
    Pool2d,
    Reshape,
    Rsqrt,
    Split,
    Sub,
    Tensor,
    TList,
    Var,
    at_most,
    constant_value,
    constant_weight,
    constructor,
    differ,
    dtype_of,
    equal,
    get,
    length,
    pair,
    reassociable,
    remove,
    shape_of,
    union,
    var,
    vec,
    wide_float,
)

F32 = "float32"
_STATS = ("sc", "b", "m", "v")
# A conv's window attributes as pattern variables (its examples bind them by the same objects)
STRIDES, PADDING, DILATIONS, G = var("st"), var("p"), var("dl"), var("g")
WINDOW = {"strides": STRIDES, "padding": PADDING, "dilations": DILATIONS, "groups": G}
POOL_WINDOW = var("win")  # a pooling's window


def _along(rank: int, axis: int) -> str:
    """``(vec-of 1 .. o .. 1)``: the shape a vector of ``o`` channels takes to broadcast along ``axis``."""
    ones: list[str | int] = [1] * rank
    ones[axis] = "o"
    return vec(ones)


# The factor sc * rsqrt(v + eps), the weights scaled by it and the shift b - m * factor in range, and
# the mean times the factor moderate where the shift meets the conv's output (an absolute bound: the
# conv's output has no range to bound the cancellation by, see ``shift_moderate``).
_FACTOR = Magnitude.of("sc") * Magnitude.rsqrt_of_sum("v", "eps")
_FOLD_RANGES = (
    *in_range(_FACTOR),
    *in_range(Magnitude.of("w") * _FACTOR),
    *in_range(Magnitude.of("b") + Magnitude.of("m") * _FACTOR, nonzero=False),
    *shift_moderate(Magnitude.of("m"), _FACTOR),
)


def _fold(layout: str) -> Variant:
    axes = CONV_AXES[layout]
    axis, kernel, channels = axes.channel, _along(4, axes.kernel_out), _along(4, axes.channel)
    conv = _conv("x", "w", layout)
    factor = Mul("sc", Rsqrt(Add("v", Full(shape=SCALAR, value="eps", dtype="d"))))
    folded = _conv("x", Mul("w", Reshape(factor, shape=kernel)), layout)
    shift = Reshape(Sub("b", Mul("m", factor)), shape=channels)
    return Variant(
        BatchNorm(conv, *_STATS, epsilon="eps", axis=axis),
        Add(folded, shift),
        (
            equal("d", dtype_of("x")),
            wide_float("d"),
            equal("o", get(shape_of(conv), axis)),
            *(constant_value(t) for t in ("w", *_STATS)),
            *_FOLD_RANGES,
        ),
    )


def _per_channel(rank: int, axis: int, *vectors: str) -> tuple[Fact, ...]:
    """Guards: ``y`` is a float32/float64 tensor of ``rank`` with ``o`` channels along ``axis``, each
    vector is of shape (o), ``s`` is the shape a vector is reshaped to to broadcast along ``axis``."""
    return (
        equal("sy", shape_of("y")),
        equal(length("sy"), rank),
        wide_float(dtype_of("y")),
        equal("o", get("sy", axis)),
        *(equal(shape_of(v), vec(["o"])) for v in vectors),
        equal("s", _along(rank, axis)),
    )


_RANK_AXES = tuple((rank, axis) for rank in range(2, 5) for axis in range(1, rank))


def _bias(rank: int, axis: int) -> tuple[Variant, ...]:
    moved = BatchNorm("y", "sc", "b", Sub("m", "c"), "v", epsilon="eps", axis=axis)
    guards = _per_channel(rank, axis, "c")
    reshaped = Variant(
        BatchNorm(Add("y", Reshape("c", shape="s")), *_STATS, epsilon="eps", axis=axis), moved, guards
    )
    if axis < rank - 1:
        return (reshaped,)
    return reshaped, Variant(BatchNorm(Add("y", "c"), *_STATS, epsilon="eps", axis=axis), moved, guards[:-1])


def _root(v: str) -> str:
    """rsqrt(v + eps): a batch norm's root, as its elementwise forms write it."""
    return Rsqrt(Add(v, Full(shape=SCALAR, value="eps", dtype="d")))


def _written_guards(rank: int, axis: int) -> tuple[Fact, ...]:
    """Guards of a batch norm written elementwise: per-channel statistics along ``axis``, and eps in
    y's dtype."""
    return (*_per_channel(rank, axis, *_STATS), equal("d", dtype_of("y")))


def _written_out(rank: int, axis: int) -> tuple[Variant, ...]:
    """flax's BatchNorm at inference: (y - mean) * (rsqrt(var + eps) * scale) + bias, the vectors
    reshaped to broadcast along ``axis`` — as traced, with the factor reshaped as a whole (after
    ``layout.drop_unit_dims``), and as jax code writes it, ``(y - mean) * rsqrt(var + eps) * scale``
    with its two factors gathered by ``constant-factors-together`` (each reshaped)."""

    factors = (
        Mul(_root(Reshape("v", shape="s")), Reshape("sc", shape="s")),
        Reshape(Mul(_root("v"), "sc"), shape="s"),
        Mul(Reshape(_root("v"), shape="s"), Reshape("sc", shape="s")),  # jax's, factors gathered
    )
    guards = _written_guards(rank, axis)
    return tuple(
        Variant(
            Add(Mul(Sub("y", Reshape("m", shape="s")), f), Reshape("b", shape="s")),
            BatchNorm("y", *_STATS, epsilon="eps", axis=axis),
            guards,
        )
        for f in factors
    )


def _distributed(rank: int, axis: int) -> tuple[Variant, ...]:
    """Keras's batch norm (keras/src/backend/jax/nn.py): inv = rsqrt(var + eps) * scale, then
    x * inv + ((-mean) * inv + offset), each vector reshaped to broadcast along ``axis`` — as Keras
    writes it, and as ``layout.drop_unit_dims`` leaves it (the vector arithmetic at rank 1, inv and
    the offset each reshaped as a whole)."""

    def along(v: str) -> str:
        return Reshape(v, shape="s")

    spread = Mul(_root(along("v")), along("sc"))
    vector = Mul(_root("v"), "sc")
    forms = (
        Add(Mul("y", spread), Add(Mul(Neg(along("m")), spread), along("b"))),
        Add(Mul("y", along(vector)), along(Add(Mul(Neg("m"), vector), "b"))),
    )
    guards = _written_guards(rank, axis)
    return tuple(Variant(lhs, BatchNorm("y", *_STATS, epsilon="eps", axis=axis), guards) for lhs in forms)


def _conv_example(rng: Any) -> dict[str | Var, Any]:
    """A conv of x by w (NCHW or NHWC, half the time a batch of 1) to y; ``s`` the shape a channel
    vector broadcasts as over y, ``s2`` y's shape without its batch, ``s3`` a channel vector's over that."""
    c, o, h, w = (int(d) for d in rng.integers(1, 5, 4))
    n = 1 if rng.integers(2) else int(rng.integers(2, 5))
    k = tuple(int(d) for d in rng.integers(1, 4, 2))
    nchw = bool(rng.integers(2))
    data = (n, c, h + k[0], w + k[1]) if nchw else (n, h + k[0], w + k[1], c)
    kernel = (o, c, *k) if nchw else (*k, c, o)
    out = (n, o, h + 1, w + 1) if nchw else (n, h + 1, w + 1, o)
    return {
        "l": "NCHW" if nchw else "NHWC",
        "s": (1, o, 1, 1) if nchw else (1, 1, 1, o),
        "s2": out[1:],
        "s3": (o, 1, 1) if nchw else (1, 1, o),
        "d": F32,
        "x": TensorType(data, F32),
        "w": TensorType(kernel, F32),
        "y": TensorType(out, F32),
        **{t: TensorType((o,), F32) for t in ("c", *_STATS)},
        "t": TensorType((1, o, 1, 1) if nchw else (1, 1, 1, o), F32),
        STRIDES: (1, 1),
        PADDING: (0, 0, 0, 0),
        DILATIONS: (1, 1),
        G: 1,
        "eps": 1e-5,
    }


def _affine_example(rng: Any) -> dict[str, Any]:
    """y of rank 2 to 4 (with a leading 1 half the time), vectors along a random axis after the first."""
    rank = int(rng.integers(2, 5))
    shape = [int(d) for d in rng.integers(1, 5, rank)]
    shape[0] = 1 if rng.integers(2) else shape[0]
    axis = int(rng.integers(1, rank))
    o = shape[axis]
    ones = [1] * rank
    ones[axis] = o
    vectors = {t: TensorType((o,), F32) for t in ("c", *_STATS)}
    return {"y": TensorType(tuple(shape), F32), **vectors, "s": tuple(ones), "eps": 1e-5, "d": F32, "a": axis}


def _unit_reshape(rng: Any) -> dict[str, Any]:
    """y with a leading 1 and s its shape without it; vectors along an axis of s."""
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    axis = int(rng.integers(len(shape)))
    vectors = {t: TensorType((shape[axis],), F32) for t in _STATS}
    return {"y": TensorType((1, *shape), F32), "s": shape, **vectors, "a": axis, "eps": 1e-5}


def _conv(x: str, w: str, layout: str, groups: Operand = G) -> str:
    return Conv2d(x, w, **{**WINDOW, "groups": groups}, layout=layout)


_SAME = (equal(shape_of("a"), shape_of("b")), equal(shape_of("w"), shape_of("v")))


def _linear(layout: str) -> tuple[Variant, ...]:
    """conv(a + b, w) = conv(a, w) + conv(b, w) and conv(a, w + v) = conv(a, w) + conv(a, v)."""
    guard = (reassociable(dtype_of("a")),)
    return (
        *both_ways(
            _conv(Add("a", "b"), "w", layout),
            Add(_conv("a", "w", layout), _conv("b", "w", layout)),
            _SAME[0],
            *guard,
        ),
        *both_ways(
            _conv("a", Add("w", "v"), layout),
            Add(_conv("a", "w", layout), _conv("a", "v", layout)),
            _SAME[1],
            *guard,
        ),
    )


def _concats(layout: str) -> tuple[Variant, ...]:
    """Batches and output channels (one input, one group) concatenate. The same products and sums, yet
    not exact on XLA:CPU, whose convolutions pack blocks with zeros (an inf input gives inf * 0 = NaN
    in a neighbouring output)."""
    channel, out = CONV_AXES[layout].channel, CONV_AXES[layout].kernel_out
    return (
        *both_ways(
            pair(_conv("a", "w", layout), _conv("b", "w", layout), 0), _conv(pair("a", "b", 0), "w", layout)
        ),
        *both_ways(
            pair(_conv("a", "w", layout, 1), _conv("a", "v", layout, 1), channel),
            _conv("a", pair("w", "v", out), layout, 1),
        ),
    )


def _groups(layout: str) -> tuple[Variant, Variant]:
    """Two convs of g groups side by side are one conv of 2g groups over the concatenations."""
    channel, out = CONV_AXES[layout].channel, CONV_AXES[layout].kernel_out
    return (
        Variant(
            pair(_conv("a", "w", layout), _conv("b", "v", layout), channel),
            _conv(pair("a", "b", channel), pair("w", "v", out), layout, 2 * G),
            _SAME,
        ),
        Variant(
            _conv(pair("a", "b", channel), pair("w", "v", out), layout),
            pair(_conv("a", "w", layout, G / 2), _conv("b", "v", layout, G / 2), channel),
            (*_SAME, equal(G % 2, 0)),
        ),
    )


def _channel_sum(layout: str) -> tuple[Variant, ...]:
    """conv(a, w) + conv(b, v) = conv([a, b], [w, v]) over input channels (one group); inexact. The
    parts may have different channel counts; everything else about them agrees."""
    channel, kin = CONV_AXES[layout].channel, CONV_AXES[layout].kernel_in
    guards = (
        *(equal(f"s{t}", shape_of(t)) for t in "abwv"),
        *(equal(get("sa", i), get("sb", i)) for i in range(4) if i != channel),
        *(equal(get("sw", i), get("sv", i)) for i in range(4) if i != kin),
        equal(get("sa", channel), get("sw", kin)),
        equal(get("sb", channel), get("sv", kin)),
        reassociable(dtype_of("a")),
    )
    return both_ways(
        Add(_conv("a", "w", layout, 1), _conv("b", "v", layout, 1)),
        _conv(pair("a", "b", channel), pair("w", "v", kin), layout, 1),
        *guards,
    )


def _pair_example(rng: Any, groups: int | None = None) -> dict[str | Var, Any]:
    """a, b of one shape, w, v of one shape, in a random layout; ``groups``, or 1 or 2."""
    nchw = bool(rng.integers(2))
    g = groups or int(rng.integers(1, 3))
    n, h, wd = (int(d) for d in rng.integers(1, 5, 3))
    c, o = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    k = tuple(int(d) for d in rng.integers(1, 3, 2))
    data = (n, c, h + 2, wd + 2) if nchw else (n, h + 2, wd + 2, c)
    kernel = (o, c // g, *k) if nchw else (*k, c // g, o)
    return {
        "a": TensorType(data, F32),
        "b": TensorType(data, F32),
        "w": TensorType(kernel, F32),
        "v": TensorType(kernel, F32),
        STRIDES: (1, 1),
        PADDING: (1, 0, 0, 1),
        DILATIONS: (1, 1),
        G: g,
    }


def _merge(n: int, layout: str) -> MultiVariant:
    """n convs of one input by different constant kernels (one group, the same window) -> one conv by
    the kernels concatenated along output channels, split back."""
    channel, out = CONV_AXES[layout].channel, CONV_AXES[layout].kernel_out
    idx = range(1, n + 1)
    term = {i: _conv("x", f"w{i}", layout, 1) for i in idx}
    facts = [equal(f"m{i}", term[i]) for i in idx]
    facts += [differ(f"w{i}", f"w{j}") for i in idx for j in idx if i < j]
    facts += [constant_weight(f"w{i}") for i in idx] + [equal(f"s{i}", shape_of(f"w{i}")) for i in idx]
    facts += [equal(get("s1", a), get(f"s{i}", a)) for i in idx[1:] for a in range(4) if a != out]
    merged = _conv("x", Concat(TList(*(f"w{i}" for i in idx)), axis=out), layout, 1)
    sizes = vec(get(f"s{i}", out) for i in idx)
    actions = tuple(union(f"m{i}", Split(merged, axis=channel, sizes=sizes, index=i - 1)) for i in idx)
    return MultiVariant(tuple(facts), actions, tuple(term[i] for i in idx))


def _merge_example(rng: Any) -> dict[str | Var, Any]:
    ex = _pair_example(rng, groups=1)
    nchw = ex["a"].shape[1] == ex["w"].shape[1]
    kernels: dict[str | Var, Any] = {}
    for i in (1, 2, 3):
        o = int(rng.integers(1, 4))
        shape = list(ex["w"].shape)
        shape[CONV_AXES["NCHW" if nchw else "NHWC"].kernel_out] = o
        kernels[f"w{i}"] = TensorType(tuple(shape), F32)
    return {**ex, "x": ex["a"], **kernels}


def _epilogue(layout: str) -> tuple[Variant, ...]:
    """conv + a bias of its output channels (reshaped to broadcast, or plain when channels are last),
    either order; and the same on the conv's output with a batch of 1 dropped (as
    ``layout.drop_unit_dims`` leaves it), the fused conv then viewed the same way."""
    channel = CONV_AXES[layout].channel
    conv = _conv("x", "w", layout)
    fused = _fused("none", layout)
    shaped = (
        equal("sy", shape_of(conv)),
        equal("o", get("sy", channel)),
        equal(shape_of("c"), vec(["o"])),
    )
    unit = (*shaped, equal(get("sy", 0), 1), equal("s2", remove("sy", 0)))
    viewed = (Reshape(conv, shape="s2"), Reshape(fused, shape="s2"))
    forms: list[tuple[Tensor, Tensor, Tensor, tuple[Fact, ...]]] = [
        (conv, fused, Reshape("c", shape="s"), (*shaped, equal("s", _along(4, channel)))),
        (*viewed, Reshape("c", shape="s3"), (*unit, equal("s3", _along(3, channel - 1)))),
    ]
    if channel == 3:  # channels last: the vector itself broadcasts
        forms += [(conv, fused, "c", shaped), (*viewed, "c", unit)]
    # a bias already of the broadcast shape (a per-channel constant computed in it), viewed as a vector
    broadcast = (*shaped[:2], equal(shape_of("t"), _along(4, channel)))
    forms.append((conv, _fused("none", layout, Reshape("t", shape=vec(["o"]))), "t", broadcast))
    return tuple(
        Variant(Add(a, b), out, when) for y, out, bias, when in forms for a, b in ((y, bias), (bias, y))
    )


def _flat_example(rng: Any) -> dict[str | Var, Any]:
    """A conv example with ``s`` a reshape of its output (flat)."""
    ex = _conv_example(rng)
    return {**ex, "s": (ex["y"].size,)}


def _fused(act: str, layout: str = "l", bias: str = "c") -> str:
    return Conv2dBiasAct("x", "w", bias, **WINDOW, layout=layout, act=act)


def _matmul_example(rng: Any) -> dict[str | Var, Any]:
    n, c, o = (int(d) for d in rng.integers(1, 5, 3))
    h, w = rand_shape(rng, 2)
    return {
        "x": TensorType((n, c, h, w), F32),
        "w": TensorType((o, c, 1, 1), F32),
        "xh": TensorType((n, h, w, c), F32),
        "wh": TensorType((1, 1, c, o), F32),
        DILATIONS: (1, 1),
    }


def _pointwise(x: str, w: str, layout: str) -> str:
    """A conv of stride 1, no padding, one group (any dilation, any kernel: the guards ask for 1x1)."""
    return Conv2d(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilations=DILATIONS, groups=1, layout=layout)


def _dims(shape: str, *axes: int) -> list[Expr]:
    return [get(shape, a) for a in axes]


# A dense conv as one product per tap only up to this many taps (3x3): beyond, im2col does the same
# products in one kernel, and each product more is a kernel more to launch and to compile
MAX_PRODUCT_TAPS = 9


def _formulation(algorithm: str, layout: str) -> tuple[Variant, ...]:
    """A conv (with or without its bias and epilogue) computed by XLA's conv kernel, and by
    ``algorithm``: im2col where the kernel reads more than one channel per group; shifted for a kernel
    of one channel per group (multiply-adds), or of at most ``MAX_PRODUCT_TAPS`` taps."""
    axes = CONV_AXES[layout]
    w = shape_of("w")
    per_group = get(w, axes.kernel_in)
    kh, kw = (get(w, k) for k in axes.kernel_spatial)
    dense: tuple[Fact, ...] = (differ(per_group, 1),)
    if algorithm == "im2col":
        cases = [dense]
    else:
        cases = [(equal(per_group, 1),), (*dense, at_most(kh * kw, MAX_PRODUCT_TAPS))]
    window = {**WINDOW, "layout": layout}
    return tuple(
        v for case in cases for v in _computed_by(algorithm, window, (wide_float(dtype_of("x")), *case))
    )


def _computed_by(algorithm: str, window: dict[str, Any], guards: tuple[Fact, ...]) -> tuple[Variant, ...]:
    """A conv over ``window`` and the same with its bias and epilogue, by XLA's conv and by ``algorithm``."""
    direct = ALGORITHMS[0]
    conv = {a: Conv2d("x", "w", **window, algorithm=a) for a in (direct, algorithm)}
    fused = {a: Conv2dBiasAct("x", "w", "c", **window, act="act", algorithm=a) for a in (direct, algorithm)}
    return tuple(Variant(term[direct], term[algorithm], guards) for term in (conv, fused))


# What Winograd assumes of run-time data: a tile's transform sums up to 4 of its elements (F(2x2,
# 3x3); F(4x4, 3x3) weighs them up to 196 in all), which overflows where the data comes within that
# factor of the dtype's largest value and the direct sum does not
TILES_IN_RANGE = "the sums its tile transforms take of the data and of the products stay in range"


def _winograd(algorithm: str) -> tuple[Variant, ...]:
    """A stride-1, undilated, one-group 3x3 conv in either layout by XLA's conv and by Winograd's
    ``algorithm`` (float32/float64: the transforms lose a few bits more than the direct sum)."""
    return tuple(
        v
        for layout in LAYOUTS
        for v in _computed_by(
            algorithm,
            {"strides": (1, 1), "padding": PADDING, "dilations": (1, 1), "groups": 1, "layout": layout},
            (
                wide_float(dtype_of("x")),
                *(equal(get(shape_of("w"), k), 3) for k in CONV_AXES[layout].kernel_spatial),
            ),
        )
    )


def _winograd_example(rng: Any) -> dict[str | Var, Any]:
    """A 3x3 conv of one group, stride 1, random padding, in either layout, at maps down to 1x1."""
    c, o = (int(d) for d in rng.integers(1, 6, 2))
    p = tuple(int(d) for d in rng.integers(0, 3, 4))
    h, w = (max(int(d), 3 - p[2 * i] - p[2 * i + 1], 1) for i, d in enumerate(rng.integers(1, 11, 2)))
    nchw = bool(rng.integers(2))
    return {
        "x": TensorType((2, c, h, w) if nchw else (2, h, w, c), F32),
        "w": TensorType((o, c, 3, 3) if nchw else (3, 3, c, o), F32),
        "c": TensorType((o,), F32),
        PADDING: p,
        "act": str(rng.choice(["none", "relu"])),
    }


def window_example(rng: Any, dense: bool = False) -> dict[str | Var, Any]:
    """A conv of random groups (depthwise among them unless ``dense``), strides, padding and
    dilations, in either layout, at maps down to 1x1 (where some taps read only padding)."""
    groups, per_group, out_per_group = (int(d) for d in rng.integers(1, 4, 3))
    per_group = per_group + 1 if dense else 1 if rng.integers(3) == 0 else per_group
    c, o = groups * per_group, groups * out_per_group
    k = tuple(int(d) for d in rng.integers(1, 4, 2))
    dl = tuple(int(d) for d in rng.integers(1, 3, 2))
    p = tuple(int(d) for d in rng.integers(0, 3, 4))
    h, w = (
        max(int(d), dl[i] * (k[i] - 1) + 1 - p[2 * i] - p[2 * i + 1], 1)
        for i, d in enumerate(rng.integers(1, 8, 2))
    )
    nchw = bool(rng.integers(2))
    return {
        "x": TensorType((2, c, h, w) if nchw else (2, h, w, c), F32),
        "w": TensorType((o, per_group, *k) if nchw else (*k, per_group, o), F32),
        "c": TensorType((o,), F32),
        STRIDES: tuple(int(d) for d in rng.integers(1, 3, 2)),
        PADDING: p,
        DILATIONS: dl,
        G: groups,
        "act": str(rng.choice(["none", "relu"])),
    }


def _max_pool(layout: str, algorithm: str) -> str:
    return Pool2d(
        "x",
        kind="max",
        window=POOL_WINDOW,
        strides=STRIDES,
        padding=PADDING,
        layout=layout,
        algorithm=algorithm,
    )


def _pool_example(rng: Any) -> dict[str | Var, Any]:
    """A max pool of a random window (up to 4x4), strides and padding (less than the window, as
    frameworks allow), in either layout, at maps down to the window's size."""
    window = tuple(int(d) for d in rng.integers(1, 5, 2))
    padding = tuple(int(rng.integers(0, window[i // 2])) for i in range(4))
    h, w = (
        max(int(d), window[i] - padding[2 * i] - padding[2 * i + 1], 1)
        for i, d in enumerate(rng.integers(1, 10, 2))
    )
    c = int(rng.integers(1, 5))
    nchw = bool(rng.integers(2))
    return {
        "x": TensorType((2, c, h, w) if nchw else (2, h, w, c), F32),
        POOL_WINDOW: window,
        STRIDES: tuple(int(d) for d in rng.integers(1, 4, 2)),
        PADDING: padding,
    }


def _itself(term: str) -> str:
    return term


RULES = [
    Rule(
        "batch-norm-into-conv",
        "batch norm after a conv is the conv with weights scaled per output channel, plus a bias",
        (_fold("NCHW"), _fold("NHWC")),
        _conv_example,
        prelude=(*CONSTANT_VALUE, *RANGES),
        exact=False,
        positive=("v",),
    ),
    Rule(
        "bias-into-batch-norm",
        "batch norm of y + a per-channel bias c is batch norm of y with the mean moved by c",
        tuple(v for rank, axis in _RANK_AXES for v in _bias(rank, axis)),
        _affine_example,
        exact=False,
    ),
    Rule(
        "batch-norm-written-out",
        "batch norm written out elementwise (as flax's BatchNorm traces) is the batch_norm op",
        tuple(v for rank, axis in _RANK_AXES for v in _written_out(rank, axis)),
        _affine_example,
        exact=False,
    ),
    Rule(
        "batch-norm-distributed",
        "batch norm in Keras's order, x * inv + (-mean * inv + offset) with inv = rsqrt(var + eps) * "
        "scale, is the batch_norm op (which subtracts the mean first)",
        tuple(v for rank, axis in _RANK_AXES for v in _distributed(rank, axis)),
        _affine_example,
        exact=False,
    ),
    Rule(
        "batch-norm-through-unit-reshape",
        "batch norm of y with a leading 1 dropped is batch norm of y (its axis one further), reshaped",
        (
            Variant(
                BatchNorm(Reshape("y", shape="s"), *_STATS, epsilon="eps", axis="a"),
                Reshape(BatchNorm("y", *_STATS, epsilon="eps", axis=var("a") + 1), shape="s"),
                (equal("sy", shape_of("y")), equal(get("sy", 0), 1), equal("s", remove("sy", 0))),
            ),
        ),
        _unit_reshape,
    ),
    Rule(
        "conv-shifted",
        "a conv is the sum over its taps that read data of the data shifted to the tap times the tap's "
        "weights: a product per tap, multiply-adds XLA fuses into one loop for a depthwise conv",
        (*_formulation("shifted", "NCHW"), *_formulation("shifted", "NHWC")),
        window_example,
        exact=False,  # the same products, summed in another order
    ),
    Rule(
        "conv-im2col",
        "a conv is one product of its patches (the shifted data of its taps that read data, stacked) "
        "by the stacked taps' weights",
        (*_formulation("im2col", "NCHW"), *_formulation("im2col", "NHWC")),
        lambda rng: window_example(rng, dense=True),
        exact=False,  # the same products, summed in another order
    ),
    *(
        Rule(
            f"conv-{algorithm}",
            f"a stride-1 3x3 conv is Winograd's F({m}x{m}, 3x3): tiles of {m + 2}x{m + 2} and the kernel "
            f"transformed, {(m + 2) ** 2} products over the channels, each tile transformed back",
            _winograd(algorithm),
            _winograd_example,
            exact=False,  # fewer products, of transformed operands
            default=m == 2,  # F(4x4, 3x3) rounds ~4x more than XLA's conv (bench.conv_layers)
            assumes=TILES_IN_RANGE,
        )
        for algorithm, m in WINOGRAD.items()
    ),
    Rule(
        "pool-max-shifted",
        "a max pool is the max over its window of the data shifted to each tap, rows then columns: loops "
        "XLA fuses (XLA:CPU's reduce-window took 3-4x as long at ResNet's and SqueezeNet's 3x3 pools)",
        tuple(
            Variant(_max_pool(layout, POOL_ALGORITHMS[0]), _max_pool(layout, "shifted")) for layout in LAYOUTS
        ),
        _pool_example,
    ),
    Rule(
        "merge-shared-input-convs",
        "convs of one input by 2 or 3 kernels are one conv by the concatenated kernels (as TASO merges)",
        tuple(_merge(n, layout) for n in (2, 3) for layout in LAYOUTS),
        _merge_example,
        prelude=CONSTANT_WEIGHT,
        exact=False,  # the same products and sums, but XLA:CPU's conv gives inf * 0 next to an inf input
    ),
    Rule(
        "conv-bias-epilogue",
        "a conv and a bias of its output channels are one kernel (Paddle's fused_conv2d_add_act)",
        (*_epilogue("NCHW"), *_epilogue("NHWC")),
        _conv_example,
    ),
    Rule(
        "conv-activation-epilogue",
        "relu/gelu (either form) of a conv with a bias (or of a reshape of it) runs in its epilogue: no "
        "memory round trip",
        tuple(
            Variant(constructor(act)(view(_fused("none"))), view(_fused(act)))
            for act in ("relu", "gelu", "gelu_erf")
            for view in (_itself, lambda t: Reshape(t, shape="s"))
        ),
        _flat_example,
    ),
    Rule(
        "conv-1x1-is-matmul",
        "a 1x1 convolution (stride 1, no padding, one group) is a matmul over the channels",
        (
            Variant(
                _pointwise("xh", "wh", "NHWC"),
                Matmul("xh", Reshape("wh", shape=vec(_dims("s", 2, 3))), dtype="d"),
                (
                    equal("s", shape_of("wh")),
                    equal(get("s", 0), 1),
                    equal(get("s", 1), 1),
                    equal("d", dtype_of("xh")),
                    wide_float("d"),
                ),
            ),
            Variant(
                _pointwise("x", "w", "NCHW"),
                Reshape(
                    Matmul(
                        Reshape("w", shape=vec(_dims("s", 0, 1))),
                        Reshape("x", shape=vec([*_dims("sx", 0, 1), get("sx", 2) * get("sx", 3)])),
                        dtype="d",
                    ),
                    shape=vec([*_dims("sx", 0), *_dims("s", 0), *_dims("sx", 2, 3)]),
                ),
                (
                    equal("s", shape_of("w")),
                    equal(get("s", 2), 1),
                    equal(get("s", 3), 1),
                    equal("sx", shape_of("x")),
                    equal("d", dtype_of("x")),
                    wide_float("d"),
                ),
            ),
        ),
        _matmul_example,
        exact=False,
    ),
]


def _conv_axiom(name: str, reason: str, variants: tuple[Variant, ...], groups: int | None = None) -> Rule:
    """An axiom for proofs: off by default, inexact (XLA:CPU's convolutions are, on inf and NaN)."""
    example = (lambda rng: _pair_example(rng, groups)) if groups else _pair_example
    return Rule(name, reason, variants, example, exact=False, default=False)


RULES += [
    _conv_axiom(
        "conv-linear",
        "conv is linear in its data and in its kernel: conv(a + b, w) = conv(a, w) + conv(b, w), and in w",
        (*_linear("NCHW"), *_linear("NHWC")),
    ),
    _conv_axiom(
        "conv-concat",
        "convs concatenate along the batch and along output channels (one input, one group)",
        (*_concats("NCHW"), *_concats("NHWC")),
        groups=1,
    ),
    _conv_axiom(
        "conv-groups",
        "two convs side by side are one conv of twice the groups over the concatenations",
        (*_groups("NCHW"), *_groups("NHWC")),
    ),
    _conv_axiom(
        "conv-channel-sum",
        "conv(a, w) + conv(b, v) = conv([a, b], [w, v]) over input channels: rounds differently",
        (*_channel_sum("NCHW"), *_channel_sum("NHWC")),
        groups=1,
    ),
]
