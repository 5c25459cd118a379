"""The optimizer's stages (eqsat.pipeline): each timed under its name, slices run alone, the time
limit checked between them."""

from __future__ import annotations

import pytest

import eqsat
from eqsat.frontend.builder import Builder
from eqsat.options import Options
from eqsat.pipeline import STAGES, Job, State, run, span
from eqsat.saturate import Limits


def _program():
    b = Builder()
    x = b.input("x", (8, 16))
    return b.build(b.transpose(b.transpose(b.relu(x), perm=(1, 0)), perm=(1, 0)))


def test_each_stage_that_did_something_is_timed_under_its_name():
    result = eqsat.optimize(_program(), rules=["transpose"], cache=False)
    names = [stage.name for stage in STAGES]
    assert set(result.report.timings) <= set(names)
    assert {"unit_dims", "load", "saturate", "extract", "accept"} <= set(result.report.timings)
    assert "bodies" not in result.report.timings  # no control flow: the stage left the state as it was
    assert "transpose" not in str(result.program)


def test_a_slice_of_the_stages_runs_alone():
    options = Options.of(rules=["transpose"])
    state = run(State.of(_program(), Job.of(options)), span("bodies", "saturate"))
    assert state.outcome is None and state.graph is not None and state.saturation is not None
    assert state.saturation.rules_fired() and list(state.timings) == ["unit_dims", "load", "saturate"]
    with pytest.raises(ValueError):
        span("saturate", "nowhere")


def test_the_time_limit_is_checked_between_stages_and_returns_the_input():
    program = _program()
    options = Options.of(rules=["transpose"], limits=Limits(timeout_s=0.0))
    state = run(State.of(program, Job.of(options)))
    assert state.final and state.outcome is not None and state.outcome.program is program
    assert state.outcome.report.cut_short == "time limit (0 s) passed before load"
    assert "accept" not in state.timings  # no stage runs after a final one
