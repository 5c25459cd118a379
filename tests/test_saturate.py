"""The runner (``eqsat.saturate``): every theme saturates on what its rules rewrite, and the limits hold
(nodes on blow-ups; time, read on a clock of ticks, through loading, saturation and extraction) with
the best program so far returned, valid."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
import eqsat.deadline
import eqsat.egraph
from eqsat import Builder, Limits, Stop
from eqsat.rules import ALL_RULES, RULESETS
from eqsat.saturate import NODE_SLACK
from eqsat.verify import example_programs, validate

# themes of rules that only grow the e-graph for proofs: they are not meant to saturate
_GROWING = {"axioms"}


@pytest.mark.slow
@pytest.mark.parametrize("theme", sorted(set(RULESETS) - _GROWING))
def test_every_theme_saturates_on_its_own_examples(theme):
    """Each rule's example, optimized with its theme alone (off-by-default rules included), reaches a
    fixpoint well inside the iteration limit: no rule of a theme undoes another's work forever."""
    limits = Limits(max_iterations=30, max_nodes=20_000, timeout_s=60)
    for rule in (r for r in ALL_RULES if r.theme == theme):
        for program in example_programs(rule):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = eqsat.optimize(program, rules=[theme], limits=limits, cache=False, progress=False)
            assert result.report.saturated, f"{rule.name}'s example: {result.report.stop_reason}\n{program}"


def _qkv(n):
    rng = np.random.default_rng(0)
    ws = [jnp.asarray(rng.normal(size=(64, 16)), jnp.float32) for _ in range(n)]
    return eqsat.from_jax(lambda x, *ws: [x @ w for w in ws], jnp.ones((8, 64)), *ws)


@pytest.mark.parametrize("match_limit", [2_000, 1_000_000])
def test_node_limits_hold_on_blow_ups(match_limit):
    limits = Limits(max_nodes=2000, match_limit=match_limit)
    program = _qkv(24)
    result = eqsat.optimize(program, limits=limits, cache=False)
    assert all(it.nodes <= NODE_SLACK * limits.max_nodes for it in result.report.saturation.iterations)
    validate(program, result.program, rules_fired=sorted(result.report.rules_fired))


_CHUNKS = eqsat.egraph.Encoding.chunks


class _Ticks:
    """A clock that moves one second each time it is read: a limit that holds on it holds however
    fast or loaded the machine is."""

    def __init__(self) -> None:
        self.reads: list[float] = []

    def __call__(self) -> float:
        self.reads.append(float(len(self.reads)))
        return self.reads[-1]


def _chain(n):
    """Unary ops and transposes in an order that does not repeat (a repeated block is optimized once)."""
    b = Builder()
    y = b.input("x", (4, 4))
    for kind in np.random.default_rng(0).integers(0, 3, n):
        y = b.transpose(y, perm=(1, 0)) if kind == 0 else b.tanh(y) if kind == 1 else b.relu(y)
    return b.build(y)


@pytest.mark.parametrize("timeout", [0, 2, 4, 6, 8, 10, 12, 16, 20, 30, 40, 60])
def test_the_time_limit_bounds_loading_saturation_and_extraction(monkeypatch, timeout):
    """Read on a clock of ticks, every phase stops within a read or two of the limit (loading in chunks,
    saturation between iterations, extraction in steps) and returns a program that runs."""
    ticks = _Ticks()
    monkeypatch.setattr(eqsat.deadline, "clock", ticks)
    monkeypatch.setattr(eqsat.egraph.Encoding, "chunks", lambda enc: _CHUNKS(enc, 40))
    program = _chain(40)
    result = eqsat.optimize(program, rules=["transpose"], limits=Limits(timeout_s=timeout), cache=False)
    late = [t for t in ticks.reads if t > timeout]
    assert len(late) <= 3, (late, result.report)
    if late:
        assert result.report.saturation.stopped(Stop.TIME_LIMIT) or "time limit" in result.report.note
    validate(program, result.program, rules_fired=sorted(result.report.rules_fired))


class _Loaded:
    """A clock on which every read takes ``step`` seconds: a machine many times slower than this one."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _attention():
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(64, 32)), jnp.float32) for _ in range(3))
    return eqsat.from_jax(lambda q, k, v: jax.nn.softmax(q @ k.T / jnp.sqrt(32.0)) @ v, q, k, v)


def test_a_loaded_machine_gets_the_same_program(monkeypatch):
    """Work, not the clock, bounds saturation: on a clock that makes every step slow, the default
    limits give the same e-graph and the same program, saturated, as on this machine's clock."""
    program = _attention()
    quiet = eqsat.optimize(program, cache=False)
    monkeypatch.setattr(eqsat.deadline, "clock", _Loaded(0.25))
    loaded = eqsat.optimize(program, cache=False)
    assert quiet.report.saturated and loaded.report.saturated and not loaded.report.cut_short
    assert [it.nodes for it in loaded.report.saturation.iterations] == [
        it.nodes for it in quiet.report.saturation.iterations
    ]
    assert str(loaded.program) == str(quiet.program) and "attention" in str(loaded.program)


def test_a_result_the_time_limit_cut_short_says_so_and_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(eqsat.config, "cache_dir", tmp_path)
    program = _attention()
    first = eqsat.optimize(program, limits=Limits(timeout_s=0.0), cache=True)
    assert "time limit (0 s)" in first.report.cut_short
    assert first.report.cache == "not cached: cut short by a time limit"
    assert "cut short: " in str(first.report)
    # the time limit is a safety net, not part of the key: had the cut-short result been stored, this
    # would have been served it
    again = eqsat.optimize(program, limits=Limits(timeout_s=300.0), cache=True)
    assert again.report.cache == "stored" and again.report.saturated and not again.report.cut_short
    assert eqsat.optimize(program, cache=True).report.cache == "hit"
