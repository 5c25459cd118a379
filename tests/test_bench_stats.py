"""The statistics ``bench.cost_accuracy`` reports, on rows made up here: rank correlations of predicted
and measured gains, the noise ceiling, and how each model's choice compares."""

from __future__ import annotations

import pytest

from bench import cost_accuracy


def _row(name, times, costs, chosen, second=None):
    return {
        "program": name,
        "times_s": times,
        "passes_s": [times, second or times],
        "costs": costs,
        "chosen": chosen,
    }


@pytest.fixture
def rows(monkeypatch):
    monkeypatch.setattr(cost_accuracy, "MODELS", {"right": None, "wrong": None})
    times = {"input": 4.0, "a": 2.0, "b": 1.0, "c": 3.0}
    right = {"input": 40.0, "a": 20.0, "b": 10.0, "c": 30.0}  # the same order as the times
    wrong = {k: 1 / v for k, v in right.items()}  # the reverse order
    chosen = {"right": "b", "wrong": "input"}
    return [_row("p", times, {"right": right, "wrong": wrong}, chosen, {**times, "a": 2.5})]


def test_a_model_that_orders_as_measured_has_rank_correlation_one(rows):
    summary = cost_accuracy.summarize({"set": rows})
    assert summary["set/right"]["rank_correlation_gain"] == pytest.approx(1.0)
    assert summary["set/wrong"]["rank_correlation_gain"] == pytest.approx(-1.0)
    assert summary["set/right"]["rank_correlation_within_median"] == pytest.approx(1.0)


def test_choices_are_judged_against_the_fastest_candidate_and_the_input(rows):
    summary = cost_accuracy.summarize({"set": rows})
    assert summary["set/right"]["worst_choice_vs_fastest"] == 1.0
    assert summary["set/right"]["min_speedup_vs_input"] == 4.0
    assert summary["set/wrong"]["worst_choice_vs_fastest"] == 4.0
    assert summary["set/wrong"]["min_speedup_vs_input"] == 1.0


def test_the_noise_ceiling_compares_two_measurements_of_the_same_candidates(rows):
    assert cost_accuracy.summarize({"set": rows})["set/measured twice"]["rank_correlation_gain"] == 1.0
    rows[0]["passes_s"][1] = {"input": 4.0, "a": 3.5, "b": 1.0, "c": 2.0}  # a and c swap places
    assert cost_accuracy.summarize({"set": rows})["set/measured twice"]["rank_correlation_gain"] == 0.5


def test_the_table_has_a_row_per_set_and_model(rows):
    table = cost_accuracy.markdown(cost_accuracy.summarize({"set": rows}))
    assert "| set | right | 3 | 1.00 |" in table
    assert "| all | *measured twice* |" in table
