"""What eqsat chooses on a GPU, and why: a follow-up to ``bench.device``, run on the H100 once the
choices of an unmeasured device profile were timed (``Device.measured``), written to
``bench/device_choices.json``.

For a 2-layer BERT encoder and a GPT-2 block at S = 512: jax.jit of the function, jax.jit of eqsat's
lowering of the program as written (``relowered``: what eqsat's own lowering costs, optimization
aside) and eqsat.jit, interleaved, with the optimization's note (its timed verdict). For bfloat16
causal attention at S = 2048: eqsat.jit against jax.jit, with the note. For MobileNetV2 at 224: eqsat.jit
against jax.jit, and both programs' relative error against the function at the highest matmul
precision (a GPU runs float32 convs and products as TF32 by default).

    python -m bench.device_choices      # on the device -> bench/device_choices.json
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from bench.cnn import CASES as CNN_CASES
from bench.common import interleaved, write
from bench.long_context import attention
from bench.models import make_bert, make_gpt2_block
from eqsat.lowering import lower

REPEATS = 10


def _ops(program: Any) -> list[str]:
    return sorted(op.name for op in program.live_ops())


def relowered(name: str, make: Callable[[], Any]) -> dict[str, Any]:
    fn, args = make()
    leaves = jax.tree_util.tree_leaves(args)
    as_lowered = jax.jit(lower(eqsat.from_jax(fn, *args)))
    optimized = eqsat.jit(fn)
    plain, again, ours = jax.jit(fn), jax.jit(fn), jax.jit(optimized)
    result = optimized.result(*args)
    t = interleaved(
        {
            "jax": lambda: plain(*args),
            "again": lambda: again(*args),
            "relowered": lambda: as_lowered(*leaves),
            "eqsat": lambda: ours(*args),
        },
        REPEATS,
    )
    return {
        "case": name,
        **t,
        "relowered_vs_jax": t["jax"] / t["relowered"],
        "eqsat_vs_jax": t["jax"] / t["eqsat"],
        "noise": t["jax"] / t["again"],
        "note": result.report.note,
        "changed": _ops(result.original) != _ops(result.program),
    }


def causal_attention(seq: int) -> dict[str, Any]:
    x = [jnp.asarray(jax.random.normal(jax.random.key(i), (1, seq, 8, 64)), jnp.bfloat16) for i in range(3)]
    optimized = eqsat.jit(attention(True))
    ours, plain, again = jax.jit(optimized), jax.jit(attention(True)), jax.jit(attention(True))
    ours(*x)
    result = optimized.result(*x)
    thunks = {"jax": lambda: plain(*x), "again": lambda: again(*x), "eqsat": lambda: ours(*x)}
    t = interleaved(thunks, REPEATS)
    return {
        "case": f"attention_causal_{seq}_forward",
        **t,
        "eqsat_vs_jax": t["jax"] / t["eqsat"],
        "noise": t["jax"] / t["again"],
        "note": result.report.note,
        "ops": sorted(set(_ops(result.program))),
    }


def cnn_error(name: str) -> dict[str, Any]:
    fn, args = CNN_CASES[name]()
    optimized = eqsat.jit(fn)
    ours, plain = jax.jit(optimized), jax.jit(fn)
    with jax.default_matmul_precision("highest"):
        exact = np.asarray(jax.jit(fn)(*args), np.float64)

    def relative(out: Any) -> float:
        return float(np.linalg.norm(np.asarray(out, np.float64) - exact) / np.linalg.norm(exact))

    t = interleaved({"jax": lambda: plain(*args), "eqsat": lambda: ours(*args)}, REPEATS)
    return {
        "case": name,
        **t,
        "eqsat_vs_jax": t["jax"] / t["eqsat"],
        "rel_error_eqsat": relative(ours(*args)),
        "rel_error_jax": relative(plain(*args)),
        "note": optimized.result(*args).report.note,
        "ops": sorted(set(_ops(optimized.result(*args).program))),
    }


def main() -> None:
    rows: list[dict[str, Any]] = []
    for run in (
        lambda: relowered("bert_2_layers_512", lambda: make_bert(2, 512)),
        lambda: relowered("gpt2_block_512", lambda: make_gpt2_block(512)),
        lambda: causal_attention(2048),
        lambda: cnn_error("mobilenet_v2_224_nhwc"),
    ):
        rows.append(run())
        print({k: v for k, v in rows[-1].items() if k != "note"}, flush=True)
        write("device_choices", {"rows": rows})


if __name__ == "__main__":
    main()
