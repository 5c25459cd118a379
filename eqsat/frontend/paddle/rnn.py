"""``pd_op.rnn``: Paddle's LSTM, GRU and simple RNN layers (``paddle.nn.LSTM/GRU/SimpleRNN``), any
number of layers, one or two directions, run with ``lax.scan`` over time.

The op reads ``x`` time-major (T, B, I), the initial states (one list: h, and c for an LSTM, each of
(layers × directions, B, H)), the weights as one list — every layer's and direction's input and hidden
weights (4H, 3H or H rows: gates in Paddle's order, LSTM i, f, g, o; GRU r, z, c), then their biases
in the same order — an optional sequence length (B,) and the dropout state. Past a sequence's length its
states are kept and its outputs are 0, as Paddle's kernel masks them. It returns the output (T, B,
directions × H), the dropout state, the final states and a reserve buffer (unused at inference).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

Array = jax.Array
Cell = Callable[[tuple[Array, ...], Array, tuple[Array, Array, Array, Array]], tuple[Array, ...]]


def _lstm(state: tuple[Array, ...], x: Array, params: tuple[Array, Array, Array, Array]) -> tuple[Array, ...]:
    h, c = state
    w_ih, w_hh, b_ih, b_hh = params
    i, f, g, o = jnp.split(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(c), c


def _gru(state: tuple[Array, ...], x: Array, params: tuple[Array, Array, Array, Array]) -> tuple[Array, ...]:
    (h,) = state
    w_ih, w_hh, b_ih, b_hh = params
    x_r, x_z, x_c = jnp.split(x @ w_ih.T + b_ih, 3, axis=-1)
    h_r, h_z, h_c = jnp.split(h @ w_hh.T + b_hh, 3, axis=-1)
    r, z = jax.nn.sigmoid(x_r + h_r), jax.nn.sigmoid(x_z + h_z)
    c = jnp.tanh(x_c + r * h_c)
    return ((h - c) * z + c,)


def _simple(activation: Callable[[Array], Array]) -> Cell:
    def cell(
        state: tuple[Array, ...], x: Array, params: tuple[Array, Array, Array, Array]
    ) -> tuple[Array, ...]:
        (h,) = state
        w_ih, w_hh, b_ih, b_hh = params
        return (activation(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh),)

    return cell


CELLS: dict[str, Cell] = {
    "LSTM": _lstm,
    "GRU": _gru,
    "RNN_TANH": _simple(jnp.tanh),
    "RNN_RELU": _simple(jax.nn.relu),
}


def _direction(
    cell: Cell, xs: Array, valid: Array | None, state: tuple[Array, ...], params: Any, reverse: bool
) -> tuple[Any, ...]:
    """One direction over time; past a sequence's length (``valid`` false) its state is kept and its
    output is 0, so the reversed direction starts at each sequence's own last step. Without lengths
    (``valid`` None) every step counts, and no step selects."""

    def step(carry: tuple[Array, ...], inputs: tuple[Array, Array | None]) -> tuple[tuple[Array, ...], Array]:
        x, keep = inputs
        new = cell(carry, x, params)
        if keep is None:
            return new, new[0]
        new = tuple(jnp.where(keep, n, c) for n, c in zip(new, carry, strict=True))
        return new, jnp.where(keep, new[0], jnp.zeros((), x.dtype))

    final, ys = lax.scan(step, state, (xs, valid), reverse=reverse)
    return ys, final


def rnn(
    x: Array, *tensors: Array, mode: str, num_layers: int, is_bidirec: int, operands: str, **_: Any
) -> tuple:
    """``pd_op.rnn`` at inference (see the module's docstring)."""
    layout = operands.split(",")
    counts = [int(kind[1:]) if kind.startswith("l") else int(kind == "t") for kind in layout]
    states = list(tensors[: counts[1]])
    weights = tensors[counts[1] : counts[1] + counts[2]]
    valid = None  # (T, B, 1): each step against each sequence's length, where the op has lengths
    if counts[3]:
        valid = jnp.arange(x.shape[0])[:, None, None] < tensors[counts[1] + counts[2]].reshape(1, -1, 1)
    cell, directions = CELLS[mode], 2 if is_bidirec else 1
    runs = num_layers * directions
    finals: list[list[Array]] = [[] for _ in states]
    out = x
    for layer in range(num_layers):
        ys = []
        for d in range(directions):
            k = layer * directions + d
            params = (
                weights[2 * k],
                weights[2 * k + 1],
                weights[2 * runs + 2 * k],
                weights[2 * runs + 2 * k + 1],
            )
            y, final = _direction(cell, out, valid, tuple(s[k] for s in states), params, reverse=d == 1)
            ys.append(y)
            for collected, value in zip(finals, final, strict=True):
                collected.append(value)
        out = jnp.concatenate(ys, axis=-1)
    nothing = jnp.zeros((), x.dtype)
    return (out, nothing, *(jnp.stack(f) for f in finals), nothing)
