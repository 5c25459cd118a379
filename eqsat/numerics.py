"""Random data and comparisons of results: what the rule checker, translation validation, the measured
cost model and the fuzzers share. Depends only on the IR."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from eqsat.ir import Program
from eqsat.types import DTYPES, TensorType

_TOLERANCE = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-9}


def tolerance(dtype: str) -> float:
    """Relative and absolute tolerance used when comparing results of ``dtype``."""
    return _TOLERANCE.get(dtype, 0.0)


def loosest(*dtypes: str) -> str:
    """The dtype with the widest tolerance: a float32 result computed from bfloat16 data (a matmul with
    a wider result type) is only as precise as bfloat16, as XLA may round there first."""
    return max(dtypes, key=tolerance)


def path_dtypes(program: Program) -> set[str]:
    """Every dtype a program computes in: its values' and its ops' dtype attributes (a fused op's
    intermediate precision)."""
    out = {v.type.dtype for v in program.inputs}
    for op in program.live_ops():
        out.update(v.type.dtype for v in op.outputs)
        out.update(a for a in op.attrs.values() if isinstance(a, str) and a in DTYPES)
    return out


INPUT_KINDS = ("normal", "large", "special")


LEAN_ELEMENTS = 1 << 22


def random_array(t: TensorType, rng: np.random.Generator, kind: str = "normal") -> Any:
    """Random data of type ``t``. ``kind``: ``normal`` (unit normal floats, ints in -100..100),
    ``large`` (floats near the top of their range for half precision, 1e3 times larger otherwise;
    ints over their whole range, so sums wrap around), ``special`` (some elements ±0, ±inf, NaN, and
    one row of the last axis all -inf, as a fully masked row; ints at their extremes), and for floats
    ``wide`` (magnitudes over the dtype's whole normal range, both signs), ``offset`` (1e4 plus a
    spread of 1e-2: subtracting two of them cancels), ``edge`` (some elements 0 or the smallest normal
    number). Normal data of more than ``LEAN_ELEMENTS`` elements is drawn in float32 (bools as bytes),
    so that a large kernel's timing holds no float64 copy of its operands."""
    lean = kind == "normal" and t.size > LEAN_ELEMENTS
    if t.dtype == "bool":
        return rng.integers(0, 2, t.shape, dtype=np.uint8).view(bool) if lean else rng.random(t.shape) < 0.5
    if "int" in t.dtype:
        info = np.iinfo(t.dtype)
        if kind == "normal":
            lo, hi = max(info.min, -100), min(info.max, 100)
            return rng.integers(lo, hi, t.shape, endpoint=True).astype(t.dtype)
        data = rng.integers(info.min, info.max, t.shape, dtype=t.dtype, endpoint=True)
        if kind == "special" and data.size:
            picks = rng.random(t.shape) < 0.3
            data[picks] = rng.choice(np.array([0, 1, info.min, info.max], dtype=t.dtype), int(picks.sum()))
        return data
    data = rng.standard_normal(t.shape, dtype=np.float32) if lean else rng.normal(size=t.shape)
    floats = jax.numpy.finfo(t.dtype)
    if kind == "wide":
        low, high = math.log10(float(floats.tiny)), math.log10(float(floats.max)) - 0.5
        data = 10.0 ** rng.uniform(low, high, t.shape) * rng.choice([-1.0, 1.0], t.shape)
    elif kind == "offset":
        data = (1e4 if floats.bits > 16 else 1e2) + data * 1e-2
    elif kind == "edge" and data.size:
        picks = rng.random(t.shape) < 0.3
        data[picks] = rng.choice([0.0, float(floats.tiny), -float(floats.tiny)], int(picks.sum()))
    if kind == "large":
        top = float(jax.numpy.finfo(t.dtype).max)
        data = data * (top / 16 if t.dtype in ("float16", "bfloat16") and top < 1e6 else 1e3)
    elif kind == "special" and data.size:
        picks = rng.random(t.shape) < 0.15
        data[picks] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], int(picks.sum()))
        if data.ndim:
            row = tuple(int(rng.integers(d)) for d in data.shape[:-1])
            data[row] = -np.inf
    # an array now, even where this is called inside a trace; in the dtype JAX computes in (float64 is
    # float32 without jax_enable_x64, as JAX would truncate it, but asked for so it does not warn)
    with jax.ensure_compile_time_eval():
        return jax.numpy.asarray(data, dtype=jax.dtypes.canonicalize_dtype(t.dtype))


def compare(a: Any, b: Any, dtype: str, strict: bool = True) -> str | None:
    """Why ``b`` (got) disagrees with ``a`` (expected), or None if it agrees.

    Integers and bools must be equal. Floats: where ``a`` is finite, ``b`` is finite and within the
    dtype's tolerance relative to the largest finite magnitude of ``a`` (rewrites such as reassociation
    legitimately change rounding); with ``strict``, where ``a`` is ±inf or NaN, ``b`` is the same.
    """
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        return f"shape {y.shape} instead of {x.shape}"
    if x.dtype != y.dtype:
        return f"dtype {y.dtype} instead of {x.dtype}"
    if x.dtype.kind in "biu":
        bad = x != y
        return f"{int(bad.sum())} elements differ (e.g. {y[bad][0]} for {x[bad][0]})" if bad.any() else None
    x, y = x.astype(np.float64), y.astype(np.float64)
    finite = np.isfinite(x)
    y = np.where(finite, y, 0.0) if not strict else y
    if (finite & ~np.isfinite(y)).any():
        return "a finite result became inf or NaN"
    scale = 1.0 + (float(np.max(np.abs(x[finite]))) if finite.any() else 0.0)
    diff = np.abs(np.where(finite, x, 0.0) - np.where(finite, y, 0.0))
    if not (diff <= tolerance(dtype) * scale).all():
        return f"max abs difference {float(np.max(diff)):g}"
    if strict and not (finite | (x == y) | (np.isnan(x) & np.isnan(y))).all():
        return "an inf or NaN result changed"
    return None


def _distance(reference: np.ndarray, x: np.ndarray) -> float:
    """The largest difference from the reference where it is finite (inf where x is not)."""
    finite = np.isfinite(reference)
    if (finite & ~np.isfinite(x)).any():
        return math.inf
    return float(np.max(np.abs(np.where(finite, reference, 0.0) - np.where(finite, x, 0.0)), initial=0.0))


def judge(
    reference: Any, expected: Any, got: Any, dtype: str, strict: bool = True, spread: float = 0.0
) -> str | None:
    """Why ``got`` (eqsat's result) is wrong, or None: measured against ``reference`` (the program as it
    reads, ``eqsat.lowering.reference``), not against ``expected`` (jax.jit's result), since XLA
    does not always round where the program says (excess precision, contraction into fused
    multiply-adds). ``got`` is right where it agrees with the reference (see ``compare``), or where
    jax.jit disagrees too and ``got`` is no further from the reference than jax.jit is, beyond the
    tolerance of ``dtype`` (the narrowest on the path) and ``spread``: XLA's liberties are not blamed
    on eqsat, and a miscompile is never hidden behind a rounding. ``spread``: how far the reference
    itself moves when its inputs move within the tolerance, where the caller knows (the program's
    sensitivity at this input: another order of jax.jit's roundings, amplified as much, lands
    anywhere within it). Where jax.jit is further from the reference than the reference's largest
    magnitude, the dtype keeps no digit of the result at this input (an ill-conditioned program: a
    layer norm of 10000 ± 0.02 in float32) and only a non-finite result of eqsat's where the
    reference is finite is wrong."""
    want = np.asarray(expected)
    ref = np.asarray(reference).astype(want.dtype)
    problem = compare(ref, got, dtype, strict)
    inexact = jax.numpy.issubdtype(want.dtype, jax.numpy.inexact)  # bfloat16's numpy kind is "V"
    if problem is None or compare(ref, want, dtype, strict) is None or not inexact:
        return problem
    r, a, b = (np.asarray(x).astype(np.float64) for x in (ref, want, got))
    if strict and not np.array_equal(np.isnan(b) | np.isinf(b), np.isnan(a) | np.isinf(a)):
        return f"{problem} (jax.jit's special values differ from it too, but not as eqsat's do)"
    finite = np.isfinite(r)
    magnitude = float(np.max(np.abs(r[finite]))) if finite.any() else 0.0
    slack = tolerance(dtype) * (1.0 + magnitude)
    ours, theirs = _distance(r, b), _distance(r, a)
    if math.isfinite(ours) and theirs > magnitude > 0:  # jax.jit keeps no digit: no rounding is judged
        return None
    if ours > theirs + slack + spread:
        return f"{problem}, further from the program than jax.jit ({ours:g} vs {theirs:g})"
    return None
