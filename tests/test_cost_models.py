"""What the cost models price an op at (``eqsat/cost/models.py``): opaque lookups read the rows they
return, not their whole table; empty attention prices without dividing by zero."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat.cost import Roofline, get_cost_model, phases
from eqsat.ops import OPAQUE
from eqsat.types import TensorType
from tests.agreement import same_as_jax_jit

TABLE, IDS, ROWS = (
    TensorType((50_000, 768), "float32"),
    TensorType((1, 128), "int32"),
    TensorType((1, 128, 768), "float32"),
)


@pytest.mark.parametrize(("name", "inputs"), [("gather", (TABLE, IDS)), ("pd_op.embedding", (IDS, TABLE))])
def test_an_embedding_lookup_reads_its_rows_not_its_table(name, inputs):
    (kernel,) = phases(OPAQUE, {"op": name}, inputs, ROWS)
    assert kernel.bytes == IDS.nbytes + 2 * ROWS.nbytes
    (other,) = phases(OPAQUE, {"op": "some_primitive"}, inputs, ROWS)  # unknown: one pass over all
    assert other.bytes == TABLE.nbytes + IDS.nbytes + ROWS.nbytes
    assert Roofline("cpu").op_cost(OPAQUE, {"op": name}, inputs, ROWS) < Roofline("cpu").op_cost(
        OPAQUE, {"op": "some_primitive"}, inputs, ROWS
    )


def test_jax_indexing_is_the_gather_the_cost_model_knows():
    table = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
    ids = jnp.asarray([[3, 7, 99]], jnp.int32)
    program = eqsat.from_jax(lambda t, i: t[i], table, ids)
    (op,) = [op for op in program.live_ops() if op.name == OPAQUE]  # after negative indices wrap
    assert op.attrs["op"] == "gather"


@pytest.mark.parametrize("name", ["nodes", "flops", "roofline", "xla"])
def test_a_models_error_is_what_the_benchmark_last_measured(name):
    """``CostModel.error`` is ``bench.cost_accuracy``'s figure, not a number left in a comment: rerun
    the benchmark (or ``--resummarize`` its rows) and this says which constant to update."""
    bench = Path(__file__).resolve().parents[1] / "bench" / "cost_accuracy.json"
    measured = json.loads(bench.read_text())["summary"][f"all/{name}"]["gain_error"]
    assert get_cost_model(name).error == round(measured, 2)


@pytest.mark.parametrize("shape", [(0, 0), (0, 3), (3, 0)])
def test_attention_over_empty_sequences_and_heads(shape):
    """Found by the fuzzer: an attention with no queries, keys or head dims divided by zero in the
    cost model's flash blocking."""
    x = jnp.ones(shape, jnp.float32)
    same_as_jax_jit(lambda x: jax.nn.softmax((x @ x.T) * 2.0, axis=-1) @ x, x, cost="roofline:cpu")
