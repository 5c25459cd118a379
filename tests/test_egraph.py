"""The e-graph (``eqsat.egraph``): its shape and dtype analysis agrees with the Python shape rules of
eqsat/ops, and encoding keeps what egglog's values would lose (the sign of zero, every bit of an int64).

Programs are encoded without their op types (``encode(typed=False)``), so the analysis derives every
one of them; optimize states them all and the analysis then only confirms them."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings

import eqsat
from eqsat.egraph import Serialized, encode, new_egraph
from eqsat.ops import OPAQUE, OPS
from tests.agreement import same_as_jax_jit
from tests.strategies import MAKERS, programs


def _analysed(program: eqsat.Program) -> tuple[Serialized, list[str]]:
    enc = encode(program, typed=False)
    egraph = new_egraph()
    egraph.parse_and_run_program(enc.commands + "\n(run-schedule (saturate analysis))")
    graph = Serialized(egraph.serialize([]).to_json())
    return graph, [graph.roots[r] for r in enc.roots]


def _assert_analysis_agrees(program: eqsat.Program) -> None:
    """Every value of ``program`` (made an output) has the type the analysis derives."""
    values = [out for op in program.ops for out in op.outputs]
    graph, roots = _analysed(dataclasses.replace(program, outputs=values, output_names=[]))
    for root, value in zip(roots, values, strict=True):
        assert graph.types.get(root) == value.type, value


def test_matmul_and_linear_shapes_at_every_rank_pair_and_transpose_flag():
    b = eqsat.Builder()
    outs = []
    for rx, ry in itertools.product(range(2, 6), repeat=2):
        batch = (3, 1, 2)[: max(rx, ry) - 2]
        bx, by = batch[len(batch) - (rx - 2) :], tuple(1 for _ in range(ry - 2))
        for tx, ty in itertools.product((0, 1), repeat=2):
            x = b.input(f"x{rx}{ry}{tx}{ty}", (*bx, *((5, 4) if tx else (4, 5))))
            y = b.input(f"y{rx}{ry}{tx}{ty}", (*by, *((7, 5) if ty else (5, 7))))
            outs.append(b.matmul(x, y, transpose_x=tx, transpose_y=ty))
        w = b.input(f"w{rx}{ry}", (5, 7))
        outs.append(b.linear(b.input(f"l{rx}{ry}", (*bx, 4, 5)), w, b.input(f"c{rx}{ry}", (7,))))
    _assert_analysis_agrees(b.build(*outs))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_ops=10))
def test_random_programs(program):
    _assert_analysis_agrees(program)


def test_every_op_the_random_programs_leave_out():
    b = eqsat.Builder()
    x = b.input("x", (2, 3, 4, 5))
    q, kv = b.input("q", (1, 4, 6, 8)), b.input("kv", (1, 2, 1, 7, 8))
    q5 = b.reshape(q, shape=(1, 2, 2, 6, 8))
    bias, mask = b.input("bias", (6, 7)), b.input("mask", (1, 1, 1, 6, 7), "bool")
    w, c = b.input("w", (5, 6)), b.input("c", (6,))
    img, k = b.input("img", (2, 3, 9, 8)), b.input("k", (4, 3, 3, 2))
    cv = b.input("cv", (4,))
    outs = [
        *(b.op(op, q5, kv, kv, bias, mask, scale=0.5, causal=1) for op in ("attention", "flash_attention")),
        b.linear(x, w, c, act="relu"),
        b.fma(x, x, x),
        b.iota(shape=(3, 4), dimension=1, dtype="int32"),
        b.reduce_max(x, axis=2, keepdim=1),
        b.reduce_sum(x, axis=1, keepdim=0),
        b.expand(b.reshape(c, shape=(1, 6)), shape=(3, 6)),
        b.concat(x, x, axis=3),
        b.split(x, axis=2, sizes=(1, 3), index=1),
        b.select(b.gt(x, x), x, b.neg(x)),
        b.scale(x, scale=2.0, bias=1.0),
        b.conv2d(img, k, strides=(2, 1), padding=(1, 0, 2, 1), dilations=(1, 2)),
        b.conv2d_bias_act(img, k, cv, padding=(1, 1, 1, 1), act="relu"),
        b.batch_norm(img, *(b.input(n, (3,)) for n in "stmv"), epsilon=1e-5, axis=1),
        b.pool2d(img, kind="avg", window=(2, 3), strides=(2, 2)),
        b.softmax(x, axis=-1),
        b.cast(x, dtype="bfloat16"),
        *(b.op(compare, x, x) for compare in ("eq", "ne", "lt", "le", "ge")),
        b.op("logical_not", b.op("logical_or", b.op("logical_and", mask, mask), mask)),
        b.op("is_finite", x),
        b.op("pow", x, b.full(shape=(), value=2.0, dtype="float32")),
        b.op("reduce_mean", x, axis=3, keepdim=1),
        b.op("rms_norm", x, b.input("g", (5,)), epsilon=1e-6),
        b.op("layer_norm", x, b.input("ln_g", (5,)), b.input("ln_b", (5,)), epsilon=1e-5),
        b.op("scores", b.input("sq", (2, 6, 8)), b.input("sk", (2, 7, 8)), bias, scale=0.5),
    ]
    program = b.build(*outs)
    _assert_analysis_agrees(program)
    left_out = set(OPS) - {OPAQUE} - set(MAKERS) - {op.name for op in program.ops}
    assert not left_out, f"in neither the random programs (tests/strategies.py) nor this test: {left_out}"


def test_the_sign_of_zero_is_kept():
    same_as_jax_jit(lambda x: (1 / (x * 0.0), 1 / (x * -0.0)), jnp.array([1.0, 2.0]), rules=[])
    same_as_jax_jit(lambda x: (1 / (x * 0.0), 1 / (x * -0.0)), jnp.array([1.0, 2.0]))


def test_int64_literals_keep_every_bit():
    with jax.enable_x64(True):
        x = jnp.array([0, 12345], jnp.int64)
        same_as_jax_jit(lambda x: (x + (2**53 + 1), x * 6364136223846793005 + 1442695040888963407), x)
