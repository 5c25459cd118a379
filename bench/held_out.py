"""Held-out recognition: Hugging Face transformers' Flax models that no rule or test here was written
from, built from small configs with random weights (nothing downloaded), through eqsat.jit.

Per model: its softmaxes (the ``exp`` ops of the traced program: one per attention block, as nothing
else in these models exponentiates) and its norms (``rsqrt`` ops: one per layer or RMS norm), against
the attention and norm ops the e-graph reaches (an extraction that prices them at nothing takes them)
and those the default cost model keeps (at these small sizes it may keep the program as written); and
eqsat.jit's output against jax.jit's; with the parameters as arguments, the gradients of the program
eqsat optimizes (``gradient="optimized"``) against jax.jit's, and in bfloat16 both against the model
computing in float32. Writes bench/held_out.json.
``python -m bench.held_out`` (float32 and bfloat16, batch 1 and 3) needs
``pip install -e '.[held-out]'`` (transformers 4.x: version 5 removed its Flax models).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from eqsat.cost.models import FunctionCost
from eqsat.numerics import compare

OUT = Path(__file__).with_suffix(".json")
ATTENTION_OPS = ("attention", "flash_attention")
NORM_OPS = ("layer_norm", "rms_norm")
SEQ, VOCAB = 16, 99
# Small configs by the keyword names each family's config takes.
_BERT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
_SEQ2SEQ = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
}
_DECODER = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
_T5 = {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4}

# model class, config class, config keywords, inputs ("tokens", "seq2seq" or "pixels")
MODELS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "roberta": ("FlaxRobertaModel", "RobertaConfig", _BERT, "tokens"),
    "electra": ("FlaxElectraModel", "ElectraConfig", {**_BERT, "embedding_size": 32}, "tokens"),
    "albert": ("FlaxAlbertModel", "AlbertConfig", {**_BERT, "embedding_size": 32}, "tokens"),
    "distilbert": (
        "FlaxDistilBertModel",
        "DistilBertConfig",
        {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64},
        "tokens",
    ),
    "roformer": ("FlaxRoFormerModel", "RoFormerConfig", _BERT, "tokens"),
    "xlm-roberta": ("FlaxXLMRobertaModel", "XLMRobertaConfig", _BERT, "tokens"),
    "bart": ("FlaxBartModel", "BartConfig", _SEQ2SEQ, "seq2seq"),
    "mbart": ("FlaxMBartModel", "MBartConfig", _SEQ2SEQ, "seq2seq"),
    "marian": ("FlaxMarianModel", "MarianConfig", {**_SEQ2SEQ, "pad_token_id": 0}, "seq2seq"),
    "pegasus": ("FlaxPegasusModel", "PegasusConfig", _SEQ2SEQ, "seq2seq"),
    "blenderbot": ("FlaxBlenderbotModel", "BlenderbotConfig", _SEQ2SEQ, "seq2seq"),
    "mt5": ("FlaxMT5Model", "MT5Config", _T5, "seq2seq"),
    "longt5": ("FlaxLongT5Model", "LongT5Config", _T5, "seq2seq"),
    "opt": ("FlaxOPTModel", "OPTConfig", {**_DECODER, "ffn_dim": 64, "word_embed_proj_dim": 32}, "tokens"),
    "gptj": (
        "FlaxGPTJModel",
        "GPTJConfig",
        {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4},
        "tokens",
    ),
    "bloom": ("FlaxBloomModel", "BloomConfig", {"hidden_size": 32, "n_layer": 2, "n_head": 4}, "tokens"),
    "gemma": (
        "FlaxGemmaModel",
        "GemmaConfig",
        {**_DECODER, "num_key_value_heads": 2, "head_dim": 8},
        "tokens",
    ),
    "beit": ("FlaxBeitModel", "BeitConfig", {**_BERT, "image_size": 32, "patch_size": 8}, "pixels"),
}


def _cast(dtype: str) -> Callable[[Any], Any]:
    return lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a


def build(name: str, batch: int, dtype: str) -> tuple[Callable[..., Any], Any, tuple[Any, ...]]:
    """The model's forward pass as a function of its parameters and inputs, its parameters (cast to
    ``dtype``) and its inputs."""
    import transformers

    model_class, config_class, keywords, inputs = MODELS[name]
    config = getattr(transformers, config_class)(vocab_size=VOCAB, **keywords)
    model = getattr(transformers, model_class)(config, seed=0, dtype=jnp.dtype(dtype))
    params = jax.tree_util.tree_map(_cast(dtype), model.params)
    rng = np.random.default_rng(0)
    if inputs == "pixels":
        pixels = jnp.asarray(rng.normal(size=(batch, 3, 32, 32)), dtype)
        return (lambda p, x: model(pixel_values=x, params=p).last_hidden_state), params, (pixels,)
    tokens = jnp.asarray(rng.integers(1, VOCAB, (batch, SEQ)), jnp.int32)
    if inputs == "seq2seq":
        return (
            (lambda p, t: model(input_ids=t, decoder_input_ids=t, params=p).last_hidden_state),
            params,
            (tokens,),
        )
    return (lambda p, t: model(input_ids=t, params=p).last_hidden_state), params, (tokens,)


def _count(program: eqsat.Program, names: tuple[str, ...]) -> int:
    return sum(1 for op in program.live_ops() if op.name in names)


def _worst(reference: Any, got: Any) -> float:
    """The largest difference of any leaf of ``got`` from ``reference``'s, relative to 1 + that leaf's
    largest magnitude in ``reference`` (``numerics.compare``'s measure)."""
    pairs = zip(jax.tree_util.tree_leaves(reference), jax.tree_util.tree_leaves(got), strict=True)
    return max(
        float(np.abs(a - b).max() / (1.0 + np.abs(a).max()))
        for a, b in ((np.asarray(r, np.float64), np.asarray(g, np.float64)) for r, g in pairs)
    )


def gradients(
    name: str, batch: int, dtype: str, model: tuple[Callable[..., Any], Any, tuple[Any, ...]]
) -> dict[str, Any]:
    """The parameters' gradients of sum(output * r) (r random) of ``model`` (as ``build`` made it),
    through eqsat.jit differentiating the optimized program (``gradient="optimized"``: what eqsat's
    rewrites do to derivatives) against jax.jit's: the worst leaf (``_worst``) and the leaves beyond
    the dtype's tolerance. In a narrower dtype, both against the same model computing in float32 from
    the same (rounded) parameters."""
    apply, params, args = model
    out = jax.eval_shape(apply, params, *args)
    r = jnp.asarray(np.random.default_rng(1).normal(size=out.shape), jnp.float32)

    def grad(f: Callable[..., Any], p: Any) -> Any:
        return jax.jit(jax.grad(lambda p: jnp.sum(f(p, *args).astype(jnp.float32) * r)))(p)

    optimized = eqsat.jit(apply, gradient="optimized")
    got, want = grad(optimized, params), grad(apply, params)
    (result,) = optimized.results.values()
    leaves = jax.tree_util.tree_leaves_with_path(want)
    beyond = [
        jax.tree_util.keystr(path)
        for (path, w), g in zip(leaves, jax.tree_util.tree_leaves(got), strict=True)
        if compare(np.asarray(w), np.asarray(g), dtype) is not None
    ]
    row = {
        "gradient_leaves": len(leaves),
        "gradient_worst_difference": _worst(want, got),
        "gradient_leaves_beyond_tolerance": beyond,
        "gradient_program_differs": result.program is not result.original,
    }
    if dtype != "float32":
        wide = grad(build(name, batch, "float32")[0], jax.tree_util.tree_map(_cast("float32"), params))
        row["gradient_from_float32"] = {"jax_jit": _worst(wide, want), "eqsat": _worst(wide, got)}
    return row


def measure(name: str, batch: int, dtype: str) -> dict[str, Any]:
    model = apply, params, args = build(name, batch, dtype)

    def fn(*xs: Any) -> Any:
        return apply(params, *xs)

    traced = eqsat.from_jax(fn, *args)
    start = time.perf_counter()
    optimized = eqsat.jit(fn)
    got = optimized(*args)
    seconds = time.perf_counter() - start
    want = jax.jit(fn)(*args)
    (result,) = optimized.results.values()
    fused = FunctionCost(lambda op, attrs, ins, out: 0.0 if op in ATTENTION_OPS + NORM_OPS else 1.0)
    reached = eqsat.optimize(traced, cost=fused).program
    scale = float(np.abs(np.asarray(want, np.float32)).max())
    return {
        "model": name,
        "batch": batch,
        "dtype": dtype,
        "softmaxes": _count(traced, ("exp",)),
        "attention_reached": _count(reached, ATTENTION_OPS),
        "attention_kept": _count(result.program, ATTENTION_OPS),
        "norms": _count(traced, ("rsqrt",)),
        "norms_reached": _count(reached, NORM_OPS),
        "norms_kept": _count(result.program, NORM_OPS),
        "max_abs_difference": float(np.abs(np.asarray(got, np.float32) - np.asarray(want, np.float32)).max()),
        "output_scale": scale,
        "optimize_seconds": round(seconds, 2),
        **gradients(name, batch, dtype, model),
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One dtype's totals: blocks and norms reached and kept of those expected, and the worst gradients
    of the runs whose program eqsat changed (the others' gradients are jax.jit's)."""
    ok = [r for r in rows if "error" not in r]
    changed = [r for r in ok if r["gradient_program_differs"]]
    wide = [r["gradient_from_float32"] for r in changed if "gradient_from_float32" in r]

    def recognized(found: str, expected: str) -> str:
        return f"{sum(min(r[found], r[expected]) for r in ok)} / {sum(r[expected] for r in ok)}"

    return {
        "attention_reached": recognized("attention_reached", "softmaxes"),
        "attention_kept": recognized("attention_kept", "softmaxes"),
        "norms_reached": recognized("norms_reached", "norms"),
        "norms_kept": recognized("norms_kept", "norms"),
        "gradient_runs_changed": len(changed),
        "gradient_leaves_compared": sum(r["gradient_leaves"] for r in changed),
        "gradient_worst_difference": max((r["gradient_worst_difference"] for r in changed), default=None),
        "gradient_leaves_beyond_tolerance": sum(len(r["gradient_leaves_beyond_tolerance"]) for r in changed),
        "gradient_from_float32": {side: max(w[side] for w in wide) for side in ("jax_jit", "eqsat")}
        if wide
        else None,
        "models_failed": sorted({r["model"] for r in rows if "error" in r}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    args = parser.parse_args()
    rows = []
    for dtype in args.dtype:
        for name in args.models:
            for batch in args.batch:
                try:
                    row = measure(name, batch, dtype)
                except Exception as error:  # a model this transformers cannot build or JAX cannot trace
                    failure = f"{type(error).__name__}: {error}"[:300]
                    row = {"model": name, "batch": batch, "dtype": dtype, "error": failure}
                rows.append(row)
                print(json.dumps(row), flush=True)

    summary = {dtype: _summary([r for r in rows if r["dtype"] == dtype]) for dtype in args.dtype}
    print(json.dumps(summary))
    OUT.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
