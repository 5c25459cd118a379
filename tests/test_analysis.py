"""The e-graph's shape and dtype analysis agrees with the Python shape rules of eqsat/ops.py.

Programs are encoded without their op types (``encode(typed=False)``), so the analysis derives every
one of them; optimize states them all and the analysis then only confirms them."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, given, settings

import eqsat
from eqsat.egraph import Serialized, encode, new_egraph
from tests.strategies import programs


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
