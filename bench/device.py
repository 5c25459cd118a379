"""The device check: on a machine with a GPU or TPU, the device-only tests and a short benchmark, in
under 5 minutes with compilation, written to ``bench/device.json``.

1. ``pytest -m gpu``: the tests that need a GPU (cuDNN's and Triton's attention run for real, against
   the program as written), skipped where the backend is not a GPU.
2. Causal and full attention in bfloat16, 8 heads of 64 in (B, S, H, D) as libraries write it, at
   S = 2048 and 8192: forward, and the gradient of a loss through it; eqsat.jit against jax.jit and
   against ``jax.nn.dot_product_attention`` with cuDNN (GPU only), interleaved in one process with
   jax.jit against itself (the noise), and which kernel eqsat's program ran on; and eqsat.jit with the
   rule ``attention-float32-softmax`` on (``widened``: the scores in float32, as the kernels compute
   them, rather than in the program's bfloat16).
3. The transformer and CNN programs of ``bench/`` (a 2-layer BERT encoder and a GPT-2 block at
   S = 512, ResNet-18 and MobileNetV2 at 224): eqsat.jit against jax.jit.
4. Pallas' GPU layer norm, RMS norm and softmax against XLA's fusion of the same (4096 × 4096,
   bfloat16), forward: whether routing eqsat's norms to them would pay (they are not routed yet).
5. Long context: causal attention at S = 32768, forward and gradient, where the program as written
   holds (B, H, S, S) scores (a side that runs out of memory is recorded as such, not timed).

The JSON is rewritten after every row, so a run stopped at its time limit keeps what it measured.

    python -m bench.device              # on the device -> bench/device.json
    python -m bench.device --smoke      # tiny shapes, no tests: checks the script on any backend
    scripts/device_check.sh             # the same as the first, with the device named first
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from bench.cnn import CASES as CNN_CASES
from bench.common import OUT, against_jax, interleaved, max_abs_diff, write
from bench.long_context import attention
from bench.models import layer_norm, make_bert, make_gpt2_block

HEADS, HEAD_DIM = 8, 64
REPEATS = 5
LONG = 32768  # the long-context case, last: (1, 8, S, S) bfloat16 scores are 16 GiB
GPU_MARK = "pytest.mark.gpu"
WIDEN = "attention-float32-softmax"  # off by default: half-precision scores computed in float32


def _library(causal: bool) -> Callable[..., jax.Array]:
    """``jax.nn.dot_product_attention``: cuDNN's kernel on a GPU, XLA's elsewhere."""
    implementation = "cudnn" if jax.default_backend() == "gpu" else None

    def attend(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation=implementation)

    return attend


def _loss(fn: Callable[..., jax.Array]) -> Callable[..., Any]:
    return jax.grad(lambda q, k, v: jnp.mean(jnp.square(fn(q, k, v).astype(jnp.float32))), (0, 1, 2))


def _kernel(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """Which kernel a program's attention ran on, from its compiled text."""
    text = jax.jit(fn).lower(*args).as_text()
    for marker, name in (("cudnn", "cudnn"), ("triton", "pallas-gpu"), ("tpu_custom_call", "pallas-tpu")):
        if marker in text:
            return name
    return "xla"


def _runs(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)`` ready, or None where the device ran out of memory for it."""
    try:
        return jax.block_until_ready(fn(*args))
    except jax.errors.JaxRuntimeError as error:
        if "RESOURCE_EXHAUSTED" in str(error) or "out of memory" in str(error).lower():
            return None
        raise


def measure_attention(seq: int, causal: bool, gradient: bool, batch: int = 1) -> dict[str, Any]:
    """eqsat.jit, jax.jit and cuDNN's attention, interleaved; a side that runs out of device memory is
    named in ``out_of_memory`` and not timed (errors are then against cuDNN's)."""
    rng = np.random.default_rng(seq)
    args = tuple(jnp.asarray(rng.normal(size=(batch, seq, HEADS, HEAD_DIM)), jnp.bfloat16) for _ in range(3))
    written = attention(causal)
    ours = eqsat.jit(written)
    widened = eqsat.jit(written, rules=["default", WIDEN])
    variants = {"eqsat": ours, "jax": written, "library": _library(causal), "eqsat_widened": widened}
    if gradient:
        variants = {name: _loss(fn) for name, fn in variants.items()}
    compiled = {name: jax.jit(fn) for name, fn in variants.items()} | {"jax_again": jax.jit(variants["jax"])}
    outputs = {name: _runs(f, args) for name, f in compiled.items()}
    ran = {name: f for name, f in compiled.items() if outputs[name] is not None}
    reference = "jax" if "jax" in ran else "library"
    errors = {
        name: max_abs_diff(outputs[name], outputs[reference]) if name in ran else None
        for name in ("eqsat", "library", "eqsat_widened")
    }
    times = interleaved({name: (lambda f=f: f(*args)) for name, f in ran.items()}, REPEATS)
    row: dict[str, Any] = {
        "case": f"attention_{'causal' if causal else 'full'}_{seq}_{'gradient' if gradient else 'forward'}"
    }
    if {"eqsat", "jax", "jax_again"} <= times.keys():
        row |= against_jax(times)
    else:
        row |= {"eqsat_s": times.get("eqsat"), "jax_s": times.get("jax")}
    if {"eqsat", "library"} <= times.keys():
        row |= {"library_s": times["library"], "vs_library": times["library"] / times["eqsat"]}
    if {"eqsat_widened", "jax"} <= times.keys():
        row |= {"widened_s": times["eqsat_widened"], "widened_speedup": times["jax"] / times["eqsat_widened"]}
    return row | {
        "out_of_memory": sorted(set(compiled) - set(ran)),
        "kernel": _kernel(variants["eqsat"], args),
        "widened_kernel": _kernel(variants["eqsat_widened"], args),
        **_optimization(ours, args),
        "errors_against": reference,
        "max_abs_error": errors["eqsat"],
        "library_max_abs_error": errors["library"],
        "widened_max_abs_error": errors["eqsat_widened"],
    }


def _optimization(jitted: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    """What eqsat's optimization of ``jitted`` at ``args`` did: seconds, kernels timed, cost model."""
    report = jitted.result(*args).report
    return {
        "optimize_s": sum(report.timings.values()),
        "kernels_timed": report.kernels_timed,
        "cost_model": report.cost_model,
        "cut_short": report.cut_short,
        "note": report.note,
    }


def measure_model(name: str, make: Callable[[], Any]) -> dict[str, Any]:
    fn, args = make()
    optimized = eqsat.jit(fn)
    plain, again, ours = jax.jit(fn), jax.jit(fn), jax.jit(optimized)
    error = max_abs_diff(ours(*args), plain(*args))
    times = interleaved(
        {"eqsat": lambda: ours(*args), "jax": lambda: plain(*args), "jax_again": lambda: again(*args)},
        REPEATS,
    )
    return {"case": name, **against_jax(times), "max_abs_error": error, **_optimization(optimized, args)}


def _rms_norm(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.square(x).mean(-1, keepdims=True) + 1e-5) * w + b


def measure_norm(name: str, rows: int, width: int) -> dict[str, Any]:
    """Pallas' GPU kernel for ``name`` against jax.jit of its formula (in interpret mode off a GPU)."""
    with warnings.catch_warnings():  # the modules warn that they moved to tokamax
        warnings.simplefilter("ignore", DeprecationWarning)
        from jax.experimental.pallas.ops.gpu import layer_norm as pallas_layer_norm
        from jax.experimental.pallas.ops.gpu import rms_norm as pallas_rms_norm
        from jax.experimental.pallas.ops.gpu import softmax as pallas_softmax

    interpret = jax.default_backend() != "gpu"
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(rows, width)), jnp.bfloat16)
    w, b = jnp.ones(width, jnp.bfloat16), jnp.zeros(width, jnp.bfloat16)
    pallas: dict[str, Callable[[], jax.Array]] = {  # the norms take (batch, seq, dim)
        "layer_norm": lambda: pallas_layer_norm.layer_norm(x[None], w, b, interpret=interpret)[0],
        "rms_norm": lambda: pallas_rms_norm.rms_norm(x[None], w, b, interpret=interpret)[0],
        "softmax": lambda: pallas_softmax.softmax(x, interpret=interpret),
    }
    formulas = {
        "layer_norm": layer_norm,
        "rms_norm": _rms_norm,
        "softmax": lambda x, w, b: jax.nn.softmax(x),
    }
    xla, again = jax.jit(formulas[name]), jax.jit(formulas[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        error = max_abs_diff(pallas[name](), xla(x, w, b))
        times = interleaved(
            {"pallas": pallas[name], "xla": lambda: xla(x, w, b), "xla_again": lambda: again(x, w, b)},
            REPEATS,
        )
    return {
        "case": f"{name}_{rows}x{width}",
        "pallas_s": times["pallas"],
        "xla_s": times["xla"],
        "speedup": times["xla"] / times["pallas"],
        "noise": times["xla"] / times["xla_again"],
        "max_abs_error": error,
    }


def cases(smoke: bool) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """The rows in the order they are measured: attention (long context after the short lengths),
    Pallas' norms, the transformer programs, then the CNNs (the longest to optimize, timing kernels)."""
    lengths = (256,) if smoke else (2048, 8192)
    out = [
        (f"attention {s} causal={c} gradient={g}", lambda s=s, c=c, g=g: measure_attention(s, c, g))
        for s in lengths
        for c in (True, False)
        for g in (False, True)
    ]
    long = 512 if smoke else LONG
    out += [
        (f"attention {long} causal=True gradient={g}", lambda g=g: measure_attention(long, True, g))
        for g in (False, True)
    ]
    rows, width = (16, 256) if smoke else (4096, 4096)
    out += [
        (f"pallas {n} vs XLA", lambda n=n: measure_norm(n, rows, width))
        for n in ("layer_norm", "rms_norm", "softmax")
    ]
    size = 64 if smoke else 512
    models = {
        f"bert_2_layers_{size}": lambda: make_bert(2, size),
        f"gpt2_block_{size}": lambda: make_gpt2_block(size),
    }
    if not smoke:
        models |= {name: CNN_CASES[name] for name in ("resnet18_224_nhwc", "mobilenet_v2_224_nhwc")}
    return out + [(name, lambda n=name, m=make: measure_model(n, m)) for name, make in models.items()]


def gpu_tests() -> dict[str, Any]:
    """``pytest -m gpu`` over the test modules that hold such tests (collecting the whole suite needs
    its test dependencies, Paddle among them), in a subprocess: its exit status, summary line, and the
    end of its output where it failed."""
    started = time.perf_counter()
    tests = Path(__file__).resolve().parent.parent / "tests"
    files = sorted(str(f) for f in tests.glob("test_*.py") if GPU_MARK in f.read_text())
    pytest = [sys.executable, "-m", "pytest", "-m", "gpu", "-o", "addopts=", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*pytest, *files],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return {
        "returncode": done.returncode,
        "summary": lines[-1] if lines else "",
        "seconds": time.perf_counter() - started,
        **({"output_tail": lines[-60:]} if done.returncode else {}),
    }


def _line(label: str, row: dict[str, Any]) -> str:
    if "speedup" not in row:
        times = f"eqsat {row['eqsat_s']} s, jax.jit {row['jax_s']} s"
        return f"{label:45s} {times}, out of memory: {row['out_of_memory']}"
    library = f"  vs jax.nn.dot_product_attention {row['vs_library']:.2f}x" if "vs_library" in row else ""
    kernel = f"  [{row['kernel']}]" if "kernel" in row else ""
    if "widened_speedup" in row:
        kernel += f"  widened {row['widened_speedup']:.2f}x [{row['widened_kernel']}]"
    return f"{label:45s} {row['speedup']:6.2f}x jax.jit (noise {row['noise']:.2f}){library}{kernel}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes, no tests: check the script anywhere"
    )
    parser.add_argument(
        "--out", default=None, help="JSON name under bench/ (default: device, or device_smoke), or a path"
    )
    parser.add_argument("--no-tests", action="store_true", help="skip pytest -m gpu (the benchmark alone)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    device = str(jax.devices()[0].device_kind)
    print(f"device check on {jax.default_backend()} ({device}), jax {jax.__version__}", flush=True)
    results: dict[str, Any] = {
        "backend": jax.default_backend(),
        "device": device,
        "jax_environment": jax.print_environment_info(return_string=True),
        "rows": [],
    }
    name = args.out or ("device_smoke" if args.smoke else "device")
    if not (args.smoke or args.no_tests):
        results["gpu_tests"] = gpu_tests()
        print(f"pytest -m gpu: {results['gpu_tests']['summary']}", flush=True)
    for label, run in cases(args.smoke):
        row = run()
        results["rows"].append(row | {"seconds_since_start": time.perf_counter() - started})
        results["seconds"] = time.perf_counter() - started
        write(name, results)
        print(_line(label, row), flush=True)
    print(f"wrote {OUT / (name + '.json')} in {results.get('seconds', 0):.0f} s")


if __name__ == "__main__":
    main()
