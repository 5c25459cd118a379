"""Extraction: greedy DAG, greedy tree and the exact ILP against brute force; never a cyclic program;
cost models, including the measured one."""

from __future__ import annotations

import itertools
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import eqsat
from eqsat import Builder, Flops, NodeCount, Roofline
from eqsat.cost import Measured
from eqsat.egraph import CyclicChoice, Serialized, decode, encode, new_egraph
from eqsat.extract import greedy_dag, greedy_tree, ilp
from eqsat.rules import select
from eqsat.saturate import Limits, install, saturate
from eqsat.verify import validate
from tests.agreement import same_as_jax_jit
from tests.strategies import programs


def _saturated(program, rules=None):
    enc = encode(program)

    def start():
        egraph = new_egraph()
        egraph.parse_and_run_program(enc.commands)
        install(egraph, select(rules))
        return egraph

    egraph, _ = saturate(start, Limits(max_iterations=6, max_nodes=400))
    graph = Serialized(egraph.serialize([]).to_json())
    return graph, enc


def _brute_force(graph, enc, program, model):
    """The cheapest acyclic program over every choice of node per reachable class (tiny graphs only)."""
    classes = list(graph.classes)
    best = float("inf")
    for combo in itertools.product(*(graph.classes[c] for c in classes)):
        pick = dict(zip(classes, combo, strict=True))
        try:
            cost = model.program_cost(decode(graph, enc, pick.__getitem__, program))
        except CyclicChoice:
            continue  # this choice is cyclic
        best = min(best, cost)
    return best


def _small_program():
    b = Builder()
    x = b.input("x", (4, 8))
    t = b.transpose(b.transpose(x, perm=(1, 0)), perm=(1, 0))
    y = b.relu(b.transpose(b.exp(b.transpose(t, perm=(1, 0))), perm=(1, 0)))
    return b.build(b.add(y, t), b.reshape(b.reshape(y, shape=(32,)), shape=(8, 4)))


@pytest.mark.parametrize("model", [NodeCount(), Flops(), Roofline("cpu")], ids=lambda m: m.name)
def test_ilp_and_greedy_agree_with_brute_force(model):
    program = _small_program()
    graph, enc = _saturated(program, ["transpose", "reshape"])
    assert max(len(n) for n in graph.classes.values()) > 1
    assert np.prod([len(n) for n in graph.classes.values()]) < 50_000
    optimum = _brute_force(graph, enc, program, model)
    roots = [graph.roots[r] for r in enc.roots]
    exact = model.program_cost(decode(graph, enc, ilp(graph, model, roots), program))
    greedy = model.program_cost(decode(graph, enc, greedy_dag(graph, model), program))
    assert exact == pytest.approx(optimum, rel=1e-9)
    assert greedy == pytest.approx(optimum, rel=1e-9)


def test_ilp_finds_sharing_greedy_cannot_see():
    """Three outputs reading one merged matmul: only the whole-graph ILP sees the shared cost."""
    b = Builder()
    x = b.input("x", (1, 128, 768))
    rng = np.random.default_rng(0)
    outs = [
        b.linear(
            x,
            b.param(f"w{i}", (768, 768), data=rng.normal(size=(768, 768))),
            b.param(f"b{i}", (768,), data=rng.normal(size=768)),
        )
        for i in range(3)
    ]
    program = b.build(*outs)
    greedy = eqsat.optimize(program, cost="roofline:h100", extractor="greedy")
    exact = eqsat.optimize(program, cost="roofline:h100", extractor="ilp")
    assert exact.report.cost_after < greedy.report.cost_after
    assert exact.report.extractor == "ilp"


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_ops=8))
def test_extractions_are_acyclic_valid_and_ilp_is_never_worse(program):
    graph, enc = _saturated(program)
    model = Roofline("cpu")
    roots = [graph.roots[r] for r in enc.roots]
    results = {}
    for name, choice in (("dag", greedy_dag(graph, model)), ("tree", greedy_tree(graph, model))):
        results[name] = decode(graph, enc, choice, program)  # decoding a cyclic choice would recurse forever
    results["ilp"] = decode(graph, enc, ilp(graph, model, roots, warm=greedy_tree(graph, model)), program)
    for extracted in results.values():
        validate(program, extracted, compile=False, kinds=("normal",))
    costs = {k: model.program_cost(v) for k, v in results.items()}
    assert costs["ilp"] <= costs["tree"] * (1 + 1e-9)


def test_measured_model_times_once_then_reads_its_cache(tmp_path):
    b = Builder()
    x, w = b.input("x", (64, 64)), b.input("w", (64, 64))
    program = b.build(b.relu(b.matmul(x, w)))
    first = Measured(tmp_path / "timings.json", repeats=2)
    cost = first.program_cost(program)
    assert first.measured_now == 2 and cost > 0 and (tmp_path / "timings.json").exists()
    again = Measured(tmp_path / "timings.json")
    assert again.program_cost(program) == cost and again.measured_now == 0


def test_measured_model_times_inside_a_trace_as_outside(tmp_path):
    """Inside eqsat.jit's trace a call of a jitted op would be staged, not run, and take microseconds."""
    b = Builder()
    x, w = b.input("x", (512, 512)), b.input("w", (512, 512))
    program = b.build(b.matmul(x, w))
    outside = Measured(tmp_path / "outside.json", repeats=3).program_cost(program)
    inside = []

    def traced(y):
        inside.append(Measured(tmp_path / "inside.json", repeats=3).program_cost(program))
        return y

    jax.jit(traced)(jnp.ones(1))
    assert inside[0] > outside / 5


def test_measured_model_interpolates_beyond_its_budget(tmp_path):
    def matmul(n):
        b = Builder()
        x, w = b.input("x", (n, n)), b.input("w", (n, n))
        return b.build(b.matmul(x, w))

    model = Measured(tmp_path / "t.json", repeats=2, budget=1)
    small = model.program_cost(matmul(64))
    big = model.program_cost(matmul(512))
    assert model.measured_now == 1
    roof = Roofline()
    ratio = small / roof.program_cost(matmul(64))
    assert big == pytest.approx(roof.program_cost(matmul(512)) * ratio)


@pytest.mark.parametrize("name", ["drr_transpose_before", "multihead_attention_before"])
def test_egglog_reference_extraction_is_valid_and_never_beats_ours(pir_path, name):
    program = eqsat.load(pir_path(name))
    reference = eqsat.optimize(program, cost="nodes", extractor="egglog", verify=True)
    ours = eqsat.optimize(program, cost="nodes", extractor="ilp", verify=True)
    assert ours.report.cost_after <= reference.report.cost_after


def test_ilp_relaxation_is_tight_between_fused_and_unfused_forms():
    """Each layer's class holds `add(matmul(x, w), b)` and `linear(x, w, b)`, which read x by different
    paths; a relaxation that let a class split between them cover x once would pay half of every layer
    below. The integer program's LP relaxation must already be at the optimum (HiGHS then needs no
    branching: that, not a time limit, is what makes ILP extraction fast)."""
    import highspy

    from eqsat.extract import _program, node_costs

    b = Builder()
    h = b.input("x", (64, 256))
    rng = np.random.default_rng(0)
    for i in range(4):
        w = b.input(f"w{i}", (256, 256))
        h = b.relu(b.add(b.matmul(h, w), b.param(f"b{i}", (256,), data=rng.normal(size=256))))
    program = b.build(h)
    graph, enc = _saturated(program, ["fusion"])
    assert sum(len(n) > 1 for n in graph.classes.values()) >= 4  # the fused forms were found
    model = Roofline("cpu")
    roots = [graph.roots[r] for r in enc.roots]
    costs = node_costs(graph, model)
    lp, _, _ = _program(graph, costs, roots, set(graph.classes))
    values = {}
    for relaxed in (False, True):
        if relaxed:
            lp.integrality_ = []
        solver = highspy.Highs()
        solver.setOptionValue("output_flag", False)
        solver.passModel(lp)
        solver.run()
        values[relaxed] = solver.getInfo().objective_function_value
    assert values[True] == pytest.approx(values[False], rel=1e-6)


def test_the_ilp_prints_nothing(capfd):
    """HiGHS prints a banner from C when a solver starts (before options can silence it): the user's
    stdout stays clean. A new thread starts a new solver."""
    program = eqsat.from_jax(lambda x: jnp.tanh(x @ x.T) @ x, jnp.ones((4, 4)))
    worker = threading.Thread(target=lambda: eqsat.optimize(program, extractor="ilp"))
    worker.start()
    worker.join()
    assert "HiGHS" not in capfd.readouterr().out


@pytest.mark.parametrize("n", [3, 30])
def test_blow_ups_extract_from_typed_classes_only(n):
    rng = np.random.default_rng(7)
    dims = [int(d) for d in rng.choice([2, 3, 8, 16, 32, 64], n + 1)]
    mats = [jnp.asarray(rng.normal(size=(dims[i], dims[i + 1])) / np.sqrt(dims[i])) for i in range(n)]

    def chain(*ms):
        out = ms[0]
        for m in ms[1:]:
            out = out @ m
        return out

    np.testing.assert_allclose(eqsat.jit(chain)(*mats), jax.jit(chain)(*mats), rtol=1e-4, atol=1e-5)
    same_as_jax_jit(lambda x, w: ((x @ w) * 0.0) * 3.0, jnp.ones((2, 3)), jnp.ones((3, 4)))


def test_extraction_never_picks_an_op_its_inputs_do_not_fit():
    """Found by the fuzzer (float64 family): a float32 gram of an empty float64 matrix, then three
    attentions. Every tensor is 0x0, so the shape guards cannot tell the float64 input from the
    float32 values, and a combination of the matmul rules (assoc, scale motion, transposes) left a
    matmul of a float32 and a float64 operand in the e-graph; extraction picked it and decoding
    raised. Extraction now keeps only nodes whose op accepts their inputs' types."""

    def attention(x):
        return jax.nn.softmax((x @ x.T) * 2.0, axis=-1) @ x

    def fn(x, s):
        y = jnp.matmul(x * s, (x * s).T, preferred_element_type=jnp.float32)
        return attention(attention(attention(y)))

    with jax.enable_x64(True):
        x = jnp.zeros((0, 0), jnp.float64)
        same_as_jax_jit(fn, x, 1.0, limits=Limits(max_iterations=8))
