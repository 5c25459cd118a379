"""Cost-model accuracy: does each model rank programs as this machine runs them?

The models: the built-in ones (nodes, flops, roofline, xla) and the two rooflines over a profile
``eqsat.calibrate`` measures at the start (not saved). For each program, every model extracts its
best program, and so do a few perturbed rooflines
(each op's cost scaled by a random factor per op name, seeded): other valid programs from the same
e-graph, so that the candidates spread. Every distinct program extracted, and the input, is then
compiled; candidates that XLA compiles to the same program are one; the rest are measured (the
fastest of interleaved samples, one process; twice, and the rank correlation between the two passes
is the ceiling any model can reach) and priced by every model. Per set of programs
and per model: the rank correlation (Spearman) between predicted and measured gain over the input
(each candidate's cost or time divided by the input's), the median of the same within each program,
the correlation over absolute costs and times, and how fast each model's own choice runs against
the fastest candidate and the input.

    python -m bench.cost_accuracy            # -> bench/cost_accuracy.json, docs/img/cost_accuracy.png
    python -m bench.cost_accuracy --quick    # a few programs
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import matplotlib
import numpy as np
from scipy.stats import spearmanr

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import eqsat
from bench import conv, models
from bench.common import OUT, interleaved, write
from bench.library_models import CASES
from bench.long_context import causal_attention
from eqsat.cost import CostModel, FunctionCost, Roofline, XlaFusion, get_cost_model
from eqsat.lowering import lower
from eqsat.ops import OPAQUE, OPS

FIGURE = OUT.parent / "docs" / "img" / "cost_accuracy.png"  # shown on the docs site and in the README
BUILT_IN = ("nodes", "flops", "roofline", "xla")
MODELS: dict[str, CostModel] = {}  # the built-in models, and the rooflines over a profile calibrated here
PERTURBED = 4  # extractions under randomly perturbed rooflines, per program
REPEATS = 15  # samples per candidate, interleaved; the fastest is kept (this machine is shared)
LIBRARY = (
    "flax-linen-encoder",
    "equinox-mlp",
    "keras-mha-masked",
    "haiku-mha",
    "jax-dpa-causal",
    "jax-dpa-gqa",
)
Case = Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]


def _causal(seq: int, dtype: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    rng = np.random.default_rng(seq)
    qkv = tuple(jax.numpy.asarray(rng.normal(size=(1, seq, 8, 64)), dtype) for _ in range(3))
    return causal_attention, qkv


def _library(name: str, dtype: str) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    dim = 64 if name.startswith("jax-dpa") else 256
    return CASES[name](1, 256, dim=dim, heads=4, dtype=jax.numpy.dtype(dtype))


def program_sets(quick: bool) -> dict[str, dict[str, Case]]:
    dtypes = ("float32",) if quick else ("float32", "bfloat16")
    library = LIBRARY[:2] if quick else LIBRARY
    sets: dict[str, dict[str, Case]] = {
        "library": {f"{n}-{d}": functools.partial(_library, n, d) for n in library for d in dtypes},
        "long-context": {
            f"causal-s{s}-{d}": functools.partial(_causal, s, d)
            for s in ((512,) if quick else (512, 1024, 2048))
            for d in dtypes
        },
        "transformers": {
            "bert-layer-s128": lambda: models.make_bert(1, 128, d=256, heads=4),
            "mlp": models.make_mlp,
        },
    }
    if not quick:
        sets["transformers"] |= {
            "gpt2-block-s256": lambda: models.make_gpt2_block(256, d=256, heads=4),
            "qkv": lambda: models.make_qkv(d=256),
            "matmul-chain": lambda: models.make_chain(512),
        }
        sets["conv"] = {n: conv.CASES[n] for n in ("resnext50_block", "squeezenet_fire", "nasrnn_cell")}
    return sets


def perturbed(seed: int) -> FunctionCost:
    """The roofline with each op's cost scaled by a factor in [1/5, 5], random per op name."""
    base = Roofline()
    rng = np.random.default_rng(seed)
    weights = {op: float(np.exp(rng.uniform(-1.6, 1.6))) for op in [*sorted(OPS), OPAQUE]}
    return FunctionCost(lambda op, attrs, ins, out: weights[op] * base.op_cost(op, attrs, ins, out))


def _canonical_hlo(text: str) -> str:
    """XLA's optimized module without its name, metadata and instruction names: two candidates with
    the same canonical text are one program to the machine, and their difference in time is noise."""
    start = re.search(r"^(%|ENTRY)", text, re.MULTILINE)  # after the tables of source locations
    body = re.sub(r", metadata=\{[^}]*\}", "", text[start.start() if start else 0 :])
    names: dict[str, str] = {}
    return re.sub(r"%[\w.\-]+", lambda m: names.setdefault(m.group(), f"%{len(names)}"), body)


def measure(name: str, case: Case) -> dict[str, Any]:
    """The program's candidates (the input and each model's choice), their times and predicted costs."""
    fn, args = case()
    program = eqsat.from_jax(fn, *args)
    leaves = jax.tree_util.tree_leaves(args)
    candidates = {"input": program}
    by_text = {str(program): "input"}  # one candidate per program text
    chosen: dict[str, str] = {}
    extractors: dict[str, Any] = dict(MODELS) | {f"random{i}": perturbed(i) for i in range(PERTURBED)}
    for label, model in extractors.items():
        extracted = eqsat.optimize(program, cost=model, cache=False).program
        chosen[label] = by_text.setdefault(str(extracted), label)
        if chosen[label] == label:
            candidates[label] = extracted
    compiled = {k: jax.jit(lower(p)).lower(*leaves).compile() for k, p in candidates.items()}
    hlo = {k: _canonical_hlo(c.as_text()) for k, c in compiled.items()}
    executables: dict[str, str] = {}  # one candidate per program XLA runs
    for k, text in hlo.items():
        executables.setdefault(text, k)
    same_as = {k: executables[text] for k, text in hlo.items()}
    chosen = {label: same_as[k] for label, k in chosen.items()}
    candidates = {k: p for k, p in candidates.items() if same_as[k] == k}
    thunks = {k: functools.partial(compiled[k], *leaves) for k in candidates}
    passes = [interleaved(thunks, REPEATS, statistic=min) for _ in range(2)]  # the second: the noise
    times = {k: min(p[k] for p in passes) for k in thunks}
    costs = {m: {k: model.program_cost(p) for k, p in candidates.items()} for m, model in MODELS.items()}
    picks = ", ".join(f"{m}->{chosen[m]}" for m in MODELS)
    print(f"{name}: {len(candidates)} candidates ({picks})", flush=True)
    return {"program": name, "times_s": times, "passes_s": passes, "costs": costs, "chosen": chosen}


def _ratios(rows: list[dict[str, Any]], model: str) -> tuple[list[float], list[float]]:
    """Predicted and measured cost of every candidate other than the input, over the input's."""
    predicted, measured = [], []
    for row in rows:
        for k, t in row["times_s"].items():
            if k != "input":
                predicted.append(row["costs"][model][k] / row["costs"][model]["input"])
                measured.append(t / row["times_s"]["input"])
    return predicted, measured


def gain_error(predicted: list[float], measured: list[float]) -> float | None:
    """How far predicted gains stray from measured ones: the 75th percentile of |log(measured /
    predicted)| (``CostModel.error``, which ``measure=True`` reads, is this over all sets)."""
    if not predicted:
        return None
    return float(np.percentile(np.abs(np.log(np.asarray(measured) / np.asarray(predicted))), 75))


def _noise(rows: list[dict[str, Any]]) -> float | None:
    """The rank correlation between two measurements of the same candidates' gains: the ceiling of
    any model's on these programs, on this machine."""
    first, second = (
        [
            row["passes_s"][i][k] / row["passes_s"][i]["input"]
            for row in rows
            for k in row["times_s"]
            if k != "input"
        ]
        for i in (0, 1)
    )
    return _rho(first, second)


def _rho(x: list[float], y: list[float]) -> float | None:
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(spearmanr(x, y).statistic)


def summarize(sets: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per set and model: rank correlations (gain and absolute) and the measured cost of its choices."""
    summary: dict[str, Any] = {}
    everything = [row for rows in sets.values() for row in rows]
    models = list(everything[0]["costs"]) if everything else []  # the models the rows were priced by
    for set_name, rows in [*sets.items(), ("all", everything)]:
        summary[f"{set_name}/measured twice"] = {"rank_correlation_gain": _noise(rows)}
        for model in models:
            gain = _rho(*_ratios(rows, model))
            within = [rho for row in rows if (rho := _rho(*_ratios([row], model))) is not None]
            absolute = _rho(
                [row["costs"][model][k] for row in rows for k in row["times_s"]],
                [t for row in rows for t in row["times_s"].values()],
            )
            regret = [row["times_s"][row["chosen"][model]] / min(row["times_s"].values()) for row in rows]
            speedup = [row["times_s"]["input"] / row["times_s"][row["chosen"][model]] for row in rows]
            predicted, measured = _ratios(rows, model)
            summary[f"{set_name}/{model}"] = {
                "rank_correlation_gain": gain,
                "gain_error": gain_error(predicted, measured),
                "rank_correlation_within_median": float(np.median(within)) if within else None,
                "rank_correlation_absolute": absolute,
                "candidates": sum(len(r["times_s"]) - 1 for r in rows),
                "worst_choice_vs_fastest": max(regret),
                "min_speedup_vs_input": min(speedup),
                "geomean_speedup_vs_input": float(np.exp(np.mean(np.log(speedup)))),
            }
    return summary


def plot(sets: dict[str, list[dict[str, Any]]], summary: dict[str, Any]) -> None:
    fig, axes = plt.subplots(2, len(MODELS) // 2, figsize=(4 * len(MODELS) // 2, 8), sharey=True)
    axes = axes.ravel()
    for ax, model in zip(axes, MODELS, strict=True):
        for set_name, rows in sets.items():
            ax.scatter(*_ratios(rows, model), label=set_name, s=18)
        rho = summary[f"all/{model}"]["rank_correlation_gain"]
        ax.set_title(f"{model}: ρ = {rho:.2f}" if rho is not None else model)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axhline(1, color="grey", lw=0.5)
        ax.axvline(1, color="grey", lw=0.5)
        ax.set_xlabel("predicted cost / input's")
    for ax in axes[:: len(MODELS) // 2]:
        ax.set_ylabel("measured time / input's")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=120)


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| programs | model | candidates | ρ gain | ρ within (median) | ρ absolute | gain error "
        "| worst choice / fastest | min speedup |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    keys = ("rank_correlation_gain", "rank_correlation_within_median", "rank_correlation_absolute")
    for key, s in summary.items():
        set_name, model = key.split("/")
        rho = [f"{s[k]:.2f}" if s.get(k) is not None else "—" for k in keys]
        if model == "measured twice":  # the noise ceiling
            lines.append(f"| {set_name} | *measured twice* | | {rho[0]} | | | | | |")
            continue
        error = f"{s['gain_error']:.2f}" if s.get("gain_error") is not None else "—"
        lines.append(
            f"| {set_name} | {model} | {s['candidates']} | {rho[0]} | {rho[1]} | {rho[2]} | {error} | "
            f"{s['worst_choice_vs_fastest']:.2f}× | {s['min_speedup_vs_input']:.2f}× |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few programs")
    parser.add_argument(
        "--resummarize", action="store_true", help="recompute the summary of bench/cost_accuracy.json's rows"
    )
    args = parser.parse_args(argv)
    if args.resummarize:
        path = OUT / "cost_accuracy.json"
        results = json.loads(path.read_text())
        results["summary"] = summarize(results["sets"])
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(markdown(results["summary"]))
        return
    print("calibrating this device (eqsat.calibrate, not saved)", flush=True)
    device = eqsat.calibrate(save=False)
    MODELS.update({m: get_cost_model(m) for m in BUILT_IN})
    MODELS.update({"roofline:calibrated": Roofline(device), "xla:calibrated": XlaFusion(device)})
    sets = {
        name: [measure(program, case) for program, case in cases.items()]
        for name, cases in program_sets(args.quick).items()
    }
    summary = summarize(sets)
    plot(sets, summary)
    results = {"repeats": REPEATS, "calibrated": device.to_json(), "sets": sets, "summary": summary}
    path = write("cost_accuracy", results)
    print(markdown(summary))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
