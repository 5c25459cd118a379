"""The fusion-aware cost model: the fusion groups it forms are the kernels XLA compiles, a group's
traffic is what enters and leaves it, and extraction under its additive approximation lands near the
exact optimum over groups."""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat import Builder, Roofline
from eqsat.cost import Fused, XlaFusion, get_cost_model
from eqsat.egraph import decode
from eqsat.extract import ilp
from eqsat.lowering import lower
from eqsat.verify import validate
from tests.test_extract import _brute_force, _saturated, _small_program

X = jnp.ones((256, 512))
W = jnp.ones((512, 512))


def _groups(program):
    return [(g.root.name, sorted(m.name for m in g.members)) for g in Fused(program).groups]


def _xla_kernels(fn, *args) -> int:
    """The kernels in XLA's compiled entry computation (fusions, dots, reductions, custom calls)."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    ops = re.findall(r"= \S+ ([\w-]+)\(", text[text.index("ENTRY") :])
    return sum(op not in ("parameter", "constant", "bitcast", "tuple", "get-tuple-element") for op in ops)


def _exp_read_twice(x):
    y = jnp.exp(x)
    return y.sum(-1), y.max(-1)


def _gelu_mlp(x, w):
    return jax.nn.gelu(x @ w + 1.0) @ w.T


def _output_and_reduction(x):
    y = x * 2
    return y, jnp.tanh(y).sum(0)


def _cheap_value_read_twice(x):
    y = x * 2 + 1
    return y.sum(-1), y.max(-1)


def test_a_loop_chain_fuses_into_the_reduction_that_reads_it():
    program = eqsat.from_jax(lambda x: jnp.tanh(x * 2 + 1).sum(-1), X)
    assert _groups(program) == [("reduce_sum", ["add", "mul", "tanh"])]
    (kernel,) = Fused(program).program_phases()
    assert kernel.bytes == X.nbytes + 256 * 4  # x read once, the sums written; nothing in between


def test_a_cheap_value_read_by_two_loops_is_computed_in_each():
    groups = _groups(eqsat.from_jax(lambda x: ((x * 2 + 1) * 3, (x * 2 + 1) + 4), X))
    assert groups == [("mul", ["add", "mul"]), ("add", ["add", "mul"])]


def test_a_value_read_by_two_reductions_is_written_once():
    groups = _groups(eqsat.from_jax(_cheap_value_read_twice, X))
    assert groups == [("add", ["mul"]), ("reduce_sum", []), ("reduce_max", [])]


def test_an_expensive_value_read_by_two_groups_is_written_once():
    groups = _groups(eqsat.from_jax(_exp_read_twice, X))
    assert groups == [("exp", []), ("reduce_sum", []), ("reduce_max", [])]


def test_a_program_output_is_written():
    assert _groups(eqsat.from_jax(_output_and_reduction, X)) == [("mul", []), ("reduce_sum", ["tanh"])]


def test_a_transposed_operand_of_a_product_is_free():
    groups = _groups(eqsat.from_jax(_gelu_mlp, X, W))
    assert [root for root, _ in groups] == ["matmul", "mul", "matmul"]  # the gelu's loop; no transpose


@pytest.mark.parametrize(
    "fn, args",
    [
        (_exp_read_twice, (X,)),
        (_cheap_value_read_twice, (X,)),
        (_gelu_mlp, (X, W)),
        (_output_and_reduction, (X,)),
        (lambda x: jax.nn.softmax(x, axis=-1), (X,)),
    ],
    ids=["exp-read-twice", "cheap-read-twice", "gelu-mlp", "output-and-reduction", "softmax"],
)
def test_the_model_counts_the_kernels_xla_compiles(fn, args):
    """As written and optimized."""
    program = eqsat.from_jax(fn, *args)
    optimized = eqsat.optimize(program, cost="xla", cache=False).program
    for p in (program, optimized):
        assert len(list(Fused(p).program_phases())) == _xla_kernels(lower(p), *args), p


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_softmax_op_runs_as_the_kernels_it_is_priced_as(dtype):
    """Four kernels as XLA:CPU compiles it (the max and the exponentials in one), five in bfloat16
    (its max a pass of its own)."""
    b = Builder()
    program = b.build(b.softmax(b.input("x", (256, 512), dtype), axis=1))
    x = jnp.ones((256, 512), dtype)
    assert len(list(Fused(program).program_phases())) == _xla_kernels(lower(program), x)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_a_softmax_written_without_its_max_is_kept(dtype):
    """``exp(x) / sum(exp(x))`` (as Mirage's GQA writes it) saves the max pass of the shifted softmax
    that ``softmax-unshifted`` makes of it: the fusion-aware model keeps the program as written."""

    def unshifted(x):
        e = jnp.exp(x)
        return e / e.sum(-1, keepdims=True)

    x = jnp.ones((2, 256, 4096), dtype)
    result = eqsat.optimize(eqsat.from_jax(unshifted, x), cost="xla", cache=False)
    assert "softmax-unshifted" in result.report.rules_fired
    assert "softmax" not in result.program.op_counts()


def test_fused_elementwise_chains_cost_one_pass():
    """Eight more elementwise ops on a reduction's input: the roofline pays eight round trips to
    memory, the fusion-aware model only their arithmetic."""

    def chain(n):
        def f(x):
            for _ in range(n):
                x = jnp.tanh(x) + 1.0
            return x.sum(-1)

        return eqsat.from_jax(f, jnp.ones((2048, 2048)))

    roofline, fused = Roofline("cpu"), XlaFusion("cpu")
    d = fused.device
    extra = {m.name: m.program_cost(chain(9)) - m.program_cost(chain(1)) for m in (roofline, fused)}
    assert 0 < extra["xla:cpu"] <= 16 * 2048 * 2048 / d.peak_flops * (1 + 1e-9)  # arithmetic at most
    assert extra["roofline:cpu"] > 5 * extra["xla:cpu"]


def test_a_dot_epilogue_is_a_loop_of_its_own_on_cpu_only():
    b = Builder()
    x = b.input("x", (1024, 1024))
    w, bias = b.input("w", (1024, 1024)), b.input("b", (1024,))
    program = b.build(b.linear(x, w, bias, act="gelu"))
    for device, epilogue in (("cpu", True), ("h100", False)):
        model = XlaFusion(device)
        kernels = len(list(Fused(program, model.epilogues).program_phases()))
        assert kernels == 1 + epilogue
        assert model.program_cost(program) > Roofline(device).program_cost(program) or not epilogue


def test_the_model_times_no_kernel_and_measures_programs_over_an_unmeasured_profile(monkeypatch):
    """On a GPU or TPU (a profile of that platform) a dot's epilogue is fused; the model times no
    kernel, and over this device's profile where that was read off a datasheet its error is unknown,
    so each program it changes is timed whole (``Device.measured``)."""
    from eqsat.cost import models
    from eqsat.cost.kernels import Call
    from eqsat.devices import DEVICES
    from eqsat.types import TensorType

    monkeypatch.setattr(models, "this_device", lambda: DEVICES["h100"])
    here, named = XlaFusion(), XlaFusion("h100")
    t = TensorType((8, 8), "float32")
    assert not here.timed_ops and here.time_kernels([[Call("transpose", {"perm": (1, 0)}, (t,), t)]], 60) == (
        0,
        0,
    )
    assert here.error == math.inf and named.error == XlaFusion.error == XlaFusion("cpu").error
    assert here.epilogues and XlaFusion("tpu-v5e").epilogues and not XlaFusion("cpu").epilogues
    assert Roofline().error == math.inf and Roofline().timed_ops == models.TIMED_OPS


def test_the_model_is_named_and_fingerprinted_apart_from_the_roofline():
    assert get_cost_model("xla").name == "xla:cpu"
    assert get_cost_model("xla:h100").name == "xla:h100"
    assert get_cost_model("xla").fingerprint() != get_cost_model("roofline").fingerprint()


def test_extraction_under_the_additive_approximation_is_near_the_exact_optimum():
    """The ILP optimizes op costs summed; on a small e-graph its choice, judged by the fusion groups,
    is within 5% of the best of every choice (brute force)."""
    program = _small_program()
    graph, enc = _saturated(program, ["transpose", "reshape"])
    model = XlaFusion("cpu")
    optimum = _brute_force(graph, enc, program, model)
    roots = [graph.roots[r] for r in enc.roots]
    chosen = model.program_cost(decode(graph, enc, ilp(graph, model, roots), program))
    assert optimum <= chosen <= optimum * 1.05


def test_optimizing_under_the_model_keeps_the_meaning():
    rng = np.random.default_rng(0)
    x, w = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((64, 128), (128, 128)))
    program = eqsat.from_jax(lambda x, w: jax.nn.softmax(jax.nn.gelu(x @ w) @ w.T, axis=-1), x, w)
    result = eqsat.optimize(program, cost="xla", cache=False)
    assert result.report.cost_after <= result.report.cost_before
    validate(program, result.program)
