"""The persistent cache of optimized programs: a hit skips optimization, anything that determines the
result misses when changed, a bad entry is ignored with a warning and rewritten, writers in two
processes leave one whole entry, the size bound holds, and a hit runs with the caller's weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat.cache import FORMAT, ProgramCache
from eqsat.cli import main
from eqsat.lowering import lower

DATA = Path(__file__).parent / "data"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The cache on, in a fresh directory."""
    monkeypatch.setattr(eqsat.config, "cache_dir", tmp_path)
    monkeypatch.setattr(eqsat.config, "enable_cache", True)
    return tmp_path / "programs"


def _program(weights: np.ndarray | None = None, batch: int = 8) -> eqsat.Program:
    """relu(x @ w + b) @ wᵀ with w and b bound parameters."""
    w = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32) if weights is None else weights
    b = eqsat.Builder()
    x = b.input("x", (batch, 16))
    bias = np.random.default_rng(1).normal(size=16)
    wv, bias = b.param("w", (16, 16), data=w), b.param("b", (16,), data=bias)
    h = b.relu(b.add(b.matmul(x, wv), bias))
    return b.build(b.matmul(h, b.transpose(wv, perm=(1, 0))))


def _run(program: eqsat.Program, x: np.ndarray) -> np.ndarray:
    return np.asarray(lower(program)(x)[0])


def test_a_hit_skips_optimization_and_gives_the_same_program(cache_dir):
    first = eqsat.optimize(_program())
    second = eqsat.optimize(_program())
    assert (first.report.cache, second.report.cache) == ("stored", "hit")
    assert set(second.report.timings) == {"cache"} and second.egraph is None
    assert str(second.program) == str(first.program)
    assert second.report.rules_fired == first.report.rules_fired
    assert "cache: hit" in str(second.report)
    assert len(ProgramCache().entries()) == 1


def test_a_hit_of_a_program_with_nothing_cheaper_is_the_input_itself(cache_dir):
    b = eqsat.Builder()
    x = b.input("x", (8, 16))
    program = b.build(b.matmul(x, b.param("w", (16, 16), data=np.eye(16, dtype=np.float32))))
    first = eqsat.optimize(program)
    again = eqsat.optimize(program)
    assert (first.report.cache, again.report.cache) == ("stored", "hit")
    assert first.program is program and again.program is program


def test_a_hit_runs_with_the_callers_weights(cache_dir):
    """Weights are not part of the key, only their ranges in powers of two: a hit binds the program to
    the caller's own values."""
    other = np.random.default_rng(2).permutation(
        np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    )
    x = np.random.default_rng(3).normal(size=(8, 16)).astype(np.float32)
    eqsat.optimize(_program())
    hit = eqsat.optimize(_program(other))
    assert hit.report.cache == "hit"
    np.testing.assert_allclose(_run(hit.program, x), _run(_program(other), x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "change",
    [
        {"rules": ["fold", "transpose"]},
        {"cost": "flops"},
        {"cost": "roofline:h100"},
        {"limits": eqsat.Limits(max_iterations=3)},
        {"extractor": "greedy"},
    ],
    ids=["rules", "cost", "device", "limits", "extractor"],
)
def test_what_determines_the_result_misses_when_changed(cache_dir, change):
    assert eqsat.optimize(_program()).report.cache == "stored"
    assert eqsat.optimize(_program(), **change).report.cache == "stored"
    assert eqsat.optimize(_program(), **change).report.cache == "hit"
    assert len(ProgramCache().entries()) == 2


def test_a_changed_program_misses(cache_dir):
    eqsat.optimize(_program())
    assert eqsat.optimize(_program(batch=4)).report.cache == "stored"


def _entry_path(cache_dir: Path) -> Path:
    (path,) = cache_dir.glob("*.json")
    return path


@pytest.mark.parametrize("damage", ["garbage", "binary", "truncated", "foreign", "wrong program"])
def test_a_bad_entry_is_ignored_with_a_warning_and_rewritten(cache_dir, damage):
    x = np.random.default_rng(3).normal(size=(8, 16)).astype(np.float32)
    good = eqsat.optimize(_program())
    path = _entry_path(cache_dir)
    text = path.read_text()
    entry = json.loads(text)
    damaged = {
        "garbage": "\x00not json",
        "binary": None,
        "truncated": text[: len(text) // 2],
        "foreign": json.dumps({**entry, "key": "0" * 64}),
        "wrong program": json.dumps({**entry, "program": str(_program(batch=4))}),
    }[damage]
    if damaged is None:
        path.write_bytes(bytes(range(256)))  # not even UTF-8
    else:
        path.write_text(damaged)
    with pytest.warns(RuntimeWarning, match="ignoring cache entry"):
        again = eqsat.optimize(_program())
    assert again.report.cache == "stored"
    np.testing.assert_allclose(_run(again.program, x), _run(good.program, x), rtol=1e-6)
    assert json.loads(path.read_text())["key"] == path.stem
    assert eqsat.optimize(_program()).report.cache == "hit"


def test_writers_in_two_processes_leave_one_whole_entry(tmp_path):
    """Two processes write the same key (entries of different sizes) 200 times each, while this one
    reads it: every read is a whole entry, and so is the last."""
    script = textwrap.dedent(
        f"""
        import sys
        from eqsat.cache import ProgramCache
        cache = ProgramCache({str(tmp_path)!r})
        for i in range(200):
            cache.put("k" * 64, {{"program": sys.argv[1] * (1000 + 5000 * (i % 3)), "report": {{}}}})
        """
    )
    writers = [subprocess.Popen([sys.executable, "-c", script, ch]) for ch in "ab"]
    cache = ProgramCache(tmp_path)
    reads = 0
    while any(w.poll() is None for w in writers):
        entry = cache.get("k" * 64)
        if entry is not None:
            assert entry["format"] == FORMAT and set(entry["program"]) <= {"a", "b"}
            reads += 1
    assert [w.wait() for w in writers] == [0, 0]
    assert cache.get("k" * 64) is not None and reads > 0
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_size_bound_holds_least_recently_used_out_first(tmp_path):
    cache = ProgramCache(tmp_path, max_bytes=10_000)
    for i in range(12):
        cache.put(f"{i:064d}", {"program": "x" * 2000, "report": {}})
        os.utime(cache.path(f"{i:064d}"), (i, i))  # an explicit order (mtimes can tie)
        cache.trim()
    kept = sorted(p.stem for p in cache.entries())
    assert cache.size() <= 10_000
    assert kept == [f"{i:064d}" for i in range(12 - len(kept), 12)] and len(kept) >= 4


def test_a_program_whose_text_does_not_hold_its_meaning_is_not_cached(cache_dir):
    """An opaque op (a JAX primitive eqsat has no op for) carries its meaning outside the text."""
    program = eqsat.from_jax(lambda x: jnp.cumsum(x, axis=0) * 2.0, jnp.ones((4, 4)))
    if not any(op.name == "opaque" for op in program.ops):
        pytest.skip("cumsum has an op of its own now: choose another primitive")
    result = eqsat.optimize(program)
    assert result.report.cache.startswith("not cached: its op 'opaque'")
    assert not cache_dir.exists() or not list(cache_dir.glob("*.json"))


def test_a_cost_function_is_not_cached_and_cache_false_is_off(cache_dir):
    assert eqsat.optimize(_program(), cost=lambda *a: 1.0).report.cache.startswith("not cached: the cost")
    assert eqsat.optimize(_program(), cache=False).report.cache == "off"
    assert not cache_dir.exists() or not list(cache_dir.glob("*.json"))


@pytest.mark.slow  # two fresh processes
def test_a_loaded_paddle_program_hits_in_a_second_process(tmp_path):
    """The second process skips optimization (its report says so; it never imports egglog) and
    computes what the first did."""
    model = DATA / "paddle_nets" / "mini_conv_squeeze_fix.json"
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np, eqsat
        program = eqsat.load({str(model)!r})
        result = eqsat.optimize(program)
        x = np.random.default_rng(0).normal(size=program.inputs[0].type.shape).astype(np.float32)
        print(result.report.cache, float(np.asarray(result.fn(x)[0]).sum()), "egglog" in sys.modules)
        """
    )
    env = {**os.environ, "EQSAT_CACHE_DIR": str(tmp_path), "EQSAT_ENABLE_CACHE": "1"}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True) for _ in "12"
    ]
    (first, total, _), (second, again, loaded) = (r.stdout.split() for r in runs)
    assert (first, second) == ("stored", "hit"), [r.stderr[-2000:] for r in runs]
    assert float(again) == pytest.approx(float(total), rel=1e-6)
    assert loaded == "False"  # a hit needs no e-graph: egglog is never imported


@pytest.mark.slow  # two fresh processes
def test_eqsat_jit_hits_in_a_second_process(tmp_path):
    """The second process's decoration finds the hint the first left and installs no rules (egglog is
    never imported); its first call hits."""
    script = textwrap.dedent(
        """
        import sys, jax, jax.numpy as jnp, eqsat
        def f(x, w):
            return jax.nn.relu(x @ w) @ w.T
        x, w = jnp.ones((4, 8)), jnp.ones((8, 8))
        fn = eqsat.jit(f)
        fn(x, w)
        (result,) = fn.results.values()
        print(result.report.cache, "egglog" in sys.modules)
        """
    )
    env = {**os.environ, "EQSAT_CACHE_DIR": str(tmp_path), "EQSAT_ENABLE_CACHE": "1"}
    outs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True) for _ in "12"
    ]
    assert [o.stdout.strip() for o in outs] == ["stored True", "hit False"], [o.stderr[-2000:] for o in outs]


def test_hints_are_left_and_cleared(tmp_path):
    store = ProgramCache(tmp_path)
    assert not store.hint("module.f file.py:3").exists()
    store.mark("module.f file.py:3")
    assert store.hint("module.f file.py:3").exists()
    store.clear()
    assert not store.hint("module.f file.py:3").exists()


def test_config_update_converts_and_refuses_unknown_names(monkeypatch):
    monkeypatch.setattr(eqsat.config, "enable_cache", True)
    eqsat.config.update("enable_cache", "off")
    assert eqsat.config.enable_cache is False
    with pytest.raises(KeyError, match="known: cache_dir"):
        eqsat.config.update("cache_size", 1)


def test_cli_cache_info_and_clear(cache_dir, capsys):
    eqsat.optimize(_program())
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert str(cache_dir) in out and "entries:   1" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert not list(cache_dir.glob("*.json"))


def test_jax_function_with_weights_closed_over_matches_after_a_hit(cache_dir):
    w = jnp.asarray(np.random.default_rng(4).normal(size=(8, 8)), jnp.float32)
    x = jnp.asarray(np.random.default_rng(5).normal(size=(4, 8)), jnp.float32)

    def f(x):
        return jax.nn.relu(x @ w) @ w.T

    first, second = eqsat.jit(f), eqsat.jit(f)
    np.testing.assert_allclose(np.asarray(first(x)), np.asarray(jax.jit(f)(x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(second(x)), np.asarray(jax.jit(f)(x)), rtol=1e-5, atol=1e-5)
    assert [r.report.cache for r in second.results.values()] == ["hit"]


def test_which_program_trains_faster_is_recorded_for_the_next_process(cache_dir):
    """A second differentiation of the same program on this device reads the first's verdict."""
    rng = np.random.default_rng(6)
    a, m, v = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((256, 256), (256, 256), (256, 1)))

    def f(a, m, v):
        return jnp.sum((a @ m) @ v)  # optimized to a (m v)

    first, second = eqsat.jit(f), eqsat.jit(f)
    jax.grad(first)(a, m, v)
    (timed,) = first.results.values()
    assert "a training step timed: as written" in timed.report.note
    np.testing.assert_allclose(jax.grad(second)(a, m, v), jax.grad(f)(a, m, v), rtol=1e-4)
    (hit,) = second.results.values()
    assert hit.report.cache == "hit" and "a training step timed (recorded)" in hit.report.note
    verdict = timed.report.note.split("a training step timed: ")[1].split(": the ")[0]
    assert verdict in hit.report.note  # the same times, so the same choice


def test_weights_of_another_scale_are_another_key(cache_dir):
    """The folding rules' guards read the weights' ranges: weights a thousand times larger may not
    fold as these did, so they are optimized afresh."""
    w = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    eqsat.optimize(_program(w))
    assert eqsat.optimize(_program(w * 1024)).report.cache == "stored"


def test_a_hit_of_a_verified_entry_is_not_checked_again(cache_dir):
    unchecked = eqsat.optimize(_program())  # stored without a check: its hit is checked
    first = eqsat.optimize(_program(), verify=True)
    assert unchecked.report.cache == "stored" and first.report.cache == "hit"
    assert "verify" in first.report.timings and "verified when it was cached" not in first.report.note
    again = eqsat.optimize(_program(), verify=True)
    assert again.report.cache == "hit" and "verify" not in again.report.timings
    assert "verified when it was cached" in again.report.note
