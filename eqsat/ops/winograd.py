"""Winograd's minimal filtering F(m x m, r x r) for stride-1 convolutions (Lavin and Gray, 2016): the
data cut into overlapping tiles of m + r - 1, each tile and the kernel transformed, the transformed
tiles multiplied channel by channel as (m + r - 1)^2 batched products, and each product's tile
transformed back to m x m outputs. The transforms come from Toom-Cook interpolation at small points,
computed exactly here (no tables copied); every transform is a sum of strided slices XLA fuses."""

from __future__ import annotations

import functools
from fractions import Fraction
from math import gcd, lcm, prod

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.types import TensorType

from .base import Kernel, product_kind

Array = jax.Array
Matrix = tuple[tuple[Fraction, ...], ...]

# Interpolation points (besides infinity) by the number of tile points n = m + r - 1. For n = 6 the
# float32 error of F(4x4, 3x3) depends on them (a 256-channel 3x3 layer at 14x14, against float64):
# 0, +-1, +-2 gave 4.4e-5 at most, 0, +-1, 1/2, -2 gave 1.8e-5 (XLA's direct conv 3.3e-6)
POINTS: dict[int, tuple[Fraction, ...]] = {
    4: (Fraction(0), Fraction(1), Fraction(-1)),
    6: (Fraction(0), Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2)),
}


def _inverse(a: list[list[Fraction]]) -> list[list[Fraction]]:
    """The exact inverse of a square matrix of fractions (Gauss-Jordan)."""
    n = len(a)
    rows = [[*row, *(Fraction(int(i == j)) for j in range(n))] for i, row in enumerate(a)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        rows[col] = [v / rows[col][col] for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                rows[r] = [v - rows[r][col] * p for v, p in zip(rows[r], rows[col], strict=True)]
    return [row[n:] for row in rows]


def _evaluation(points: tuple[Fraction, ...], size: int) -> list[list[Fraction]]:
    """Evaluating a polynomial of ``size`` coefficients at ``points`` and at infinity (its leading
    coefficient): an (n, size) matrix."""
    rows = [[p**k for k in range(size)] for p in points]
    return [*rows, [Fraction(int(k == size - 1)) for k in range(size)]]


@functools.cache
def transforms(m: int, r: int) -> tuple[Matrix, Matrix, Matrix]:
    """(A^T, G, B^T) of F(m, r): y = A^T [(G g) * (B^T d)] correlates d (m + r - 1 values) with g (r
    values). Toom-Cook for the product of polynomials of r and m coefficients, transposed in the data;
    each row of B^T scaled to the smallest integers, G's row divided by the same."""
    n = m + r - 1
    points = POINTS[n]
    a = _evaluation(points, m)  # (n, m): A^T is its transpose
    g = _evaluation(points, r)  # (n, r)
    b = _inverse(_evaluation(points, n))  # (n, n): interpolation; B^T is its transpose
    bt = [list(col) for col in zip(*b, strict=True)]
    for i, row in enumerate(bt):
        scale = Fraction(lcm(*(v.denominator for v in row)), gcd(*(v.numerator for v in row)))
        bt[i] = [v * scale for v in row]
        g[i] = [v / scale for v in g[i]]
    at = [list(col) for col in zip(*a, strict=True)]
    return tuple(map(tuple, at)), tuple(map(tuple, g)), tuple(map(tuple, bt))


def _combine(parts: list[Array], row: tuple[Fraction, ...]) -> Array:
    """sum_k row[k] * parts[k], skipping zero coefficients and multiplying only where one is not +-1."""
    terms = [
        (c > 0, part if abs(c) == 1 else part * np.asarray(float(abs(c)), part.dtype))
        for c, part in zip(row, parts, strict=True)
        if c != 0
    ]
    (first_positive, total), *rest = terms
    total = total if first_positive else -total
    for positive, term in rest:
        total = total + term if positive else total - term
    return total


def _strided(x: Array, axis: int, start: int, count: int, step: int) -> Array:
    return lax.slice_in_dim(x, start, start + step * (count - 1) + 1, step, axis)


def _transform(parts: list[Array], matrix: Matrix) -> list[Array]:
    return [_combine(parts, row) for row in matrix]


def _kernel_size(w: Array, layout: str) -> int:
    """r of an r x r kernel, HWIO (NHWC) or OIHW (NCHW)."""
    return w.shape[0] if layout == "NHWC" else w.shape[2]


def kernel_transform(w: Array, layout: str, m: int) -> Array:
    """G g G^T of every (input, output) channel pair of the kernel: ((m + r - 1)^2, I, O)."""
    r = _kernel_size(w, layout)
    gm = np.asarray([[float(v) for v in row] for row in transforms(m, r)[1]], w.dtype)
    u = jnp.einsum("ak,klio,bl->abio" if layout == "NHWC" else "ak,oikl,bl->abio", gm, w, gm)
    return u.reshape(-1, *u.shape[2:])


def conv(
    x: Array, w: Array, padding: tuple[int, ...], spatial: tuple[int, int], layout: str, m: int
) -> Array:
    """A stride-1, undilated, one-group conv with an r x r kernel by F(m x m, r x r). ``spatial``: the
    data's spatial axes; ``layout``: NHWC (kernel HWIO) or NCHW (kernel OIHW)."""
    r = _kernel_size(w, layout)
    n = m + r - 1
    at, _, bt = transforms(m, r)
    out = [x.shape[a] + padding[2 * i] + padding[2 * i + 1] - r + 1 for i, a in enumerate(spatial)]
    tiles = [-(-o // m) for o in out]
    pads = [(0, 0)] * 4
    for i, a in enumerate(spatial):  # pad to whole tiles: the extra outputs are cropped
        pads[a] = (padding[2 * i], m * tiles[i] + r - 1 - x.shape[a] - padding[2 * i])
    padded = jnp.pad(x, pads)
    rows = _transform([_strided(padded, spatial[0], k, tiles[0], m) for k in range(n)], bt)
    cells = [
        v
        for row in rows
        for v in _transform([_strided(row, spatial[1], k, tiles[1], m) for k in range(n)], bt)
    ]
    prods = _products(cells, kernel_transform(w, layout, m), layout)
    columns = [_transform([prods[a * n + b] for a in range(n)], at) for b in range(n)]  # [b][i]
    outs = [v for i in range(m) for v in _transform([column[i] for column in columns], at)]
    return _interleave(outs, m, tiles, out, layout)


# The transformed tiles multiplied as one batched product while they are small, else a product per
# cell: stacking copies every cell once more. On this project's 2-core CPU, 14x14x256 at batch 1 (0.8
# MB of cells) ran 1.5-1.6 ms stacked, 1.9-2.3 ms as 16 products; 56x56x64 at batch 8 (26 MB) 33-42 ms
# stacked, 15-21 ms not
STACKED_MAX_BYTES = 4 << 20


def _products(cells: list[Array], u: Array, layout: str) -> list[Array]:
    """Each transformed tile times its cell of the transformed kernel, over the input channels."""
    dtype = cells[0].dtype
    if len(cells) * cells[0].size * dtype.itemsize <= STACKED_MAX_BYTES:
        spec = "tnhwi,tio->tnhwo" if layout == "NHWC" else "tnihw,tio->tnohw"
        return list(jnp.einsum(spec, jnp.stack(cells), u, preferred_element_type=dtype))
    spec = "nhwi,io->nhwo" if layout == "NHWC" else "nihw,io->nohw"
    return [jnp.einsum(spec, cell, u[t], preferred_element_type=dtype) for t, cell in enumerate(cells)]


def _interleave(outs: list[Array], m: int, tiles: list[int], out: list[int], layout: str) -> Array:
    """The m x m output tiles (each (N, tiles, tiles, O) or (N, O, tiles, tiles)) as one map, cropped."""
    y = jnp.stack(outs).reshape(m, m, *outs[0].shape)
    if layout == "NHWC":
        y = y.transpose(2, 3, 0, 4, 1, 5)  # (N, th, m, tw, m, O)
        y = y.reshape(y.shape[0], tiles[0] * m, tiles[1] * m, y.shape[-1])
        return y[:, : out[0], : out[1], :]
    y = y.transpose(2, 3, 4, 0, 5, 1)  # (N, O, th, m, tw, m)
    y = y.reshape(*y.shape[:2], tiles[0] * m, tiles[1] * m)
    return y[:, :, : out[0], : out[1]]


def kernels(
    x: TensorType, out: TensorType, channel: int, spatial: tuple[int, int], r: int, m: int
) -> list[Kernel]:
    """What F(m x m, r x r) runs as (n = m + r - 1): the data's tiles transformed to n^2 cells, the kernel
    transformed (XLA folds it where the kernel is a constant), n^2 products over the input channels,
    and the products transformed back to m x m outputs a tile (the kernel a bias and activation ride)."""
    n = m + r - 1
    tiles = out.shape[0] * prod(-(-out.shape[a] // m) for a in spatial)
    c, o, item = x.shape[channel], out.shape[channel], x.itemsize
    cells, weights, products = (float(n * n * k * item) for k in (tiles * c, c * o, tiles * o))
    return [
        Kernel(4.0 * n**3 * tiles * c, x.nbytes + cells),
        Kernel(2.0 * n * r * (r + n) * c * o, r * r * c * o * item + weights),
        Kernel(
            2.0 * n * n * tiles * c * o,
            cells + weights + products,
            kind=product_kind(x.dtype, out.dtype),
            written=products,
        ),
        Kernel(2.0 * m * n * (n + m) * tiles * o, products + out.nbytes, written=float(out.nbytes)),
    ]
