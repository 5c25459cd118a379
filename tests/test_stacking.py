"""Products that share a right operand, stacked (eqsat.stacking): which products group, which never
(a left operand that depends on another product of the group), and the stacked program chosen and
run where it pays."""

from __future__ import annotations

import eqsat
from eqsat import Builder
from eqsat.stacking import stacked_products

RULE = ["stack-products-sharing-a-weight"]


def _cell(steps: int = 5, hidden: int = 64):
    """A recurrent cell over ``steps`` inputs: x_t @ wx depends on no product, h @ wh on the last."""
    b = Builder()
    wx, wh = b.input("wx", (hidden, hidden)), b.input("wh", (hidden, hidden))
    h = b.input("h0", (1, hidden))
    for t in range(steps):
        h = b.tanh(b.add(b.matmul(b.input(f"x{t}", (1, hidden)), wx), b.matmul(h, wh)))
    return b.build(h)


def test_the_input_projections_stack_and_the_recurrent_ones_do_not():
    program = _cell()
    proposed = stacked_products(program)
    assert len(proposed) == 5 and {a.reason for a in proposed} == {
        "5 products of one weight stacked into one"
    }
    products = [a.value for a in proposed]
    stacked_lefts = {v.name for a in proposed for v in a.ops[0].inputs}
    assert stacked_lefts == {f"x{t}" for t in range(5)}
    assert all(a.ops[1].inputs[1].name == "wx" for a in proposed) and len(set(map(id, products))) == 5


def test_a_product_of_a_products_result_is_never_stacked_with_it():
    b = Builder()
    x, w = b.input("x", (2, 8)), b.input("w", (8, 8))
    first = b.matmul(x, w)
    second = b.matmul(b.relu(first), w)  # depends on first: stacking them would be a cycle
    third = b.matmul(b.input("y", (3, 8)), w)
    proposed = stacked_products(b.build(second, third))
    assert {v.name for a in proposed for v in a.ops[0].inputs} == {"x", "y"}


def test_nothing_is_proposed_for_a_lone_product_or_transposed_operands():
    b = Builder()
    x, y, w = b.input("x", (8, 2)), b.input("y", (8, 2)), b.input("w", (8, 8))
    lone = b.matmul(b.input("z", (2, 8)), w)
    assert stacked_products(b.build(lone, b.matmul(x, w, transpose_x=1), b.matmul(y, w, transpose_x=1))) == []


def test_the_stacked_cell_is_chosen_and_computes_the_cell():
    """The weight read once instead of five times: the roofline prices it cheaper; ``verify`` runs
    both programs on random inputs."""
    program = _cell(hidden=256)
    result = eqsat.optimize(program, RULE, cost="roofline:cpu", verify=True)
    products = [op for op in result.program.live_ops() if op.name == "matmul"]
    assert len(products) == 6  # one stacked product of wx, five of wh
    assert [op.inputs[1].name for op in products].count("wx") == 1
    assert result.report.rules_fired[RULE[0]] == 5  # an alternative for each input projection
