"""Convolutions: batch norm folded into the conv before it, a bias moved into the batch norm after it,
and a 1x1 convolution as a matmul (Paddle Lite's conv_bn fuser, TVM's FoldScaleAxis, TASO's rules).

Each form is an alternative in the e-graph; the cost model decides. Folding computes the conv's new
weights ``w * scale / sqrt(var + eps)`` and bias from the weights and statistics, which must be
leaves (parameters or constants: then XLA computes them once, at compile time), and float32/float64
(half-precision weights would be rescaled in half precision).
"""

from __future__ import annotations

from typing import Any

from eqsat.egraph import ANALYSIS
from eqsat.ir import TensorType

from .base import Rule, Variant, rand_shape

F32 = "float32"
# Per layout: the channel axis of the data, the shape of the kernel's per-output-channel factor,
# the shape a per-channel vector is reshaped to to broadcast over the data.
_LAYOUTS = {
    "NCHW": (1, "(vec-of o 1 1 1)", "(vec-of 1 o 1 1)"),
    "NHWC": (3, "(vec-of 1 1 1 o)", "(vec-of 1 1 1 o)"),
}
_CONV = "(Conv2d x w st p dl g {layout})"
_STATS = ("sc", "b", "m", "v")
# ``(constant-value t)``: t is computed from leaves (parameters, constants) only: folding it into a
# weight costs nothing at run time.
CONSTANT_VALUE = (
    "(relation constant-value (Tensor))",
    f"(rule ((= t (Input n))) ((constant-value t)) :ruleset {ANALYSIS})",
    f"(rule ((= t (Full s v d))) ((constant-value t)) :ruleset {ANALYSIS})",
    f"(rule ((= t (Reshape a s)) (constant-value a)) ((constant-value t)) :ruleset {ANALYSIS})",
    *(
        f"(rule ((= t ({op} a b)) (constant-value a) (constant-value b)) ((constant-value t)) "
        f":ruleset {ANALYSIS})"
        for op in ("Add", "Sub", "Mul")
    ),
)


def _fold(layout: str) -> Variant:
    axis, kernel, channels = _LAYOUTS[layout]
    conv = _CONV.format(layout=f'"{layout}"')
    factor = "(Mul sc (Rsqrt (Add v (Full (vec-empty) eps d))))"
    folded = f'(Conv2d x (Mul w (Reshape {factor} {kernel})) st p dl g "{layout}")'
    shift = f"(Reshape (Sub b (Mul m {factor})) {channels})"
    return Variant(
        f"(BatchNorm {conv} sc b m v eps {axis})",
        f"(Add {folded} {shift})",
        (
            "(= d (dtype x))",
            "(wide-float d)",
            f"(= o (vec-get (shape {conv}) {axis}))",
            *(f"(constant-value {t})" for t in ("w", *_STATS)),
        ),
    )


def _per_channel(rank: int, axis: int, *vectors: str) -> tuple[str, ...]:
    """Guards: ``y`` is a float32/float64 tensor of ``rank`` with ``o`` channels along ``axis``, each
    vector is of shape (o), ``s`` is the shape a vector is reshaped to to broadcast along ``axis``."""
    ones = ["1"] * rank
    ones[axis] = "o"
    return (
        "(= sy (shape y))",
        f"(= (vec-length sy) {rank})",
        "(wide-float (dtype y))",
        f"(= o (vec-get sy {axis}))",
        *(f"(= (shape {v}) (vec-of o))" for v in vectors),
        f"(= s (vec-of {' '.join(ones)}))",
    )


_RANK_AXES = tuple((rank, axis) for rank in range(2, 5) for axis in range(1, rank))


def _bias(rank: int, axis: int) -> tuple[Variant, ...]:
    moved = f"(BatchNorm y sc b (Sub m c) v eps {axis})"
    guards = _per_channel(rank, axis, "c")
    reshaped = Variant(f"(BatchNorm (Add y (Reshape c s)) sc b m v eps {axis})", moved, guards)
    if axis < rank - 1:
        return (reshaped,)
    return reshaped, Variant(f"(BatchNorm (Add y c) sc b m v eps {axis})", moved, guards[:-1])


def _written_out(rank: int, axis: int) -> tuple[Variant, ...]:
    """flax's BatchNorm at inference: (y - mean) * (rsqrt(var + eps) * scale) + bias, the vectors
    reshaped to broadcast along ``axis`` — as traced, and with the factor reshaped as a whole (after
    ``layout.drop_unit_dims``)."""
    rsqrt = "(Rsqrt (Add {v} (Full (vec-empty) eps d)))"
    factors = (
        f"(Mul {rsqrt.format(v='(Reshape v s)')} (Reshape sc s))",
        f"(Reshape (Mul {rsqrt.format(v='v')} sc) s)",
    )
    guards = (*_per_channel(rank, axis, *_STATS), "(= d (dtype y))")
    return tuple(
        Variant(
            f"(Add (Mul (Sub y (Reshape m s)) {f}) (Reshape b s))",
            f"(BatchNorm y sc b m v eps {axis})",
            guards,
        )
        for f in factors
    )


def _conv_example(rng: Any) -> dict[str, Any]:
    n, c, o, h, w = (int(d) for d in rng.integers(1, 5, 5))
    k = tuple(int(d) for d in rng.integers(1, 4, 2))
    nchw = bool(rng.integers(2))
    data = (n, c, h + k[0], w + k[1]) if nchw else (n, h + k[0], w + k[1], c)
    kernel = (o, c, *k) if nchw else (*k, c, o)
    out = (n, o, h + 1, w + 1) if nchw else (n, h + 1, w + 1, o)
    return {
        "s": (1, o, 1, 1) if nchw else (1, 1, 1, o),
        "d": F32,
        "x": TensorType(data, F32),
        "w": TensorType(kernel, F32),
        "y": TensorType(out, F32),
        **{t: TensorType((o,), F32) for t in ("c", *_STATS)},
        "st": (1, 1),
        "p": (0, 0, 0, 0),
        "dl": (1, 1),
        "g": 1,
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


def _matmul_example(rng: Any) -> dict[str, Any]:
    n, c, o = (int(d) for d in rng.integers(1, 5, 3))
    h, w = rand_shape(rng, 2)
    return {
        "x": TensorType((n, c, h, w), F32),
        "w": TensorType((o, c, 1, 1), F32),
        "xh": TensorType((n, h, w, c), F32),
        "wh": TensorType((1, 1, c, o), F32),
        "dl": (1, 1),
    }


_ONE_BY_ONE = ("(vec-of 1 1)", "(vec-of 0 0 0 0)")

RULES = [
    Rule(
        "batch-norm-into-conv",
        "batch norm after a conv is the conv with weights scaled per output channel, plus a bias",
        (_fold("NCHW"), _fold("NHWC")),
        _conv_example,
        prelude=CONSTANT_VALUE,
        exact=False,
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
        "batch-norm-through-unit-reshape",
        "batch norm of y with a leading 1 dropped is batch norm of y (its axis one further), reshaped",
        (
            Variant(
                "(BatchNorm (Reshape y s) sc b m v eps a)",
                "(Reshape (BatchNorm y sc b m v eps (+ a 1)) s)",
                ("(= sy (shape y))", "(= (vec-get sy 0) 1)", "(= s (vec-remove sy 0))"),
            ),
        ),
        _unit_reshape,
    ),
    Rule(
        "conv-1x1-is-matmul",
        "a 1x1 convolution (stride 1, no padding, one group) is a matmul over the channels",
        (
            Variant(
                f'(Conv2d xh wh {_ONE_BY_ONE[0]} {_ONE_BY_ONE[1]} dl 1 "NHWC")',
                "(Matmul xh (Reshape wh (vec-of (vec-get s 2) (vec-get s 3))) 0 0 d)",
                ("(= s (shape wh))", "(= d (dtype xh))", "(wide-float d)"),
            ),
            Variant(
                f'(Conv2d x w {_ONE_BY_ONE[0]} {_ONE_BY_ONE[1]} dl 1 "NCHW")',
                "(Reshape (Matmul (Reshape w (vec-of (vec-get s 0) (vec-get s 1))) "
                "(Reshape x (vec-of (vec-get sx 0) (vec-get sx 1) (* (vec-get sx 2) (vec-get sx 3)))) 0 0 d) "
                "(vec-of (vec-get sx 0) (vec-get s 0) (vec-get sx 2) (vec-get sx 3)))",
                ("(= s (shape w))", "(= sx (shape x))", "(= d (dtype x))", "(wide-float d)"),
            ),
        ),
        _matmul_example,
        exact=False,
    ),
]
