"""Whole networks saved by Paddle itself as users save them (bench/paddle_nets.py): paddle.vision
CNNs, a paddle.nn.TransformerEncoder, a paddle.nn.Transformer (encoder and decoder, two inputs) and
LSTM/GRU/simple RNN layers (``pd_op.rnn``) at a small input size, random weights and randomized
batch-norm statistics (so folding is exercised), saved with ``paddle.jit.save`` and a batch of
``None``. eqsat loads each with no help, optimizes it, and runs it at two batch sizes; Paddle
Inference's predictor runs the same file."""

from __future__ import annotations

import numpy as np
import pytest

import eqsat
from bench.paddle_nets import NETWORKS, input_names, inputs, predictor, save


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_a_network_saved_with_a_dynamic_batch_matches_paddle_inference(name, tmp_path):
    path = save(name, tmp_path)
    program = eqsat.load(path)
    shapes = NETWORKS[name][1]
    assert program.dynamic == {n: (-1, *shape) for n, shape in zip(input_names(shapes), shapes, strict=True)}
    result = eqsat.optimize(program)
    assert not [
        op for op in result.program.live_ops() if op.name == "opaque" and "batch_norm" in op.attrs["op"]
    ]
    paddle_inference = predictor(path)
    for batch in (2, 3):
        xs = inputs(name, batch, seed=batch)
        outputs, wanted = result.fn(*xs), paddle_inference(xs)
        assert len(outputs) == len(wanted)
        for got, want in zip(outputs, wanted, strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
