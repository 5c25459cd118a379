"""The same optimized programs whatever the machine's load.

Runs, each in a fresh process, the documentation's code (every ```python block of README.md and
docs/*.md, as ``tests/test_docs.py`` does), the notebooks' code cells, and three library models through
``eqsat.jit`` (a 2-layer flax encoder, a 2-layer BERT, a ResNet-18-style flax CNN: ``bench.first_call``'s),
and records every optimization they make: the program optimized, the program chosen, why saturation
stopped, what cut it short. Three runs of each:

- ``quiet``: nothing else running, a fresh cache directory (kernels timed and verdicts recorded there);
- ``loaded``: ``--busy`` processes spinning beside it (6 by default, on this 2-core machine a load of
  about 8), reading the kernel timings and verdicts the quiet run recorded, as a later run on the same
  machine does (the program cache off, so everything is optimized again);
- ``loaded_cold``: the same load and a fresh cache directory, so kernels and programs are timed under
  load.

Saturation and extraction are budgeted in work, so ``loaded`` must give the quiet run's programs, every
one; ``loaded_cold`` shows what remains to measurement (a choice made by timing is made again under
load, with a margin noise must not cross). The program cache is off in all three; ``eqsat.jit`` waits
for its optimizations (``EQSAT_BACKGROUND=0``) so each run records them all.

    python -m bench.under_load             # -> bench/under_load.json
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import write

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MODELS = ("encoder", "bert", "resnet")
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _sources(source: str) -> list[tuple[str, str]]:
    """(name, code) of what one child runs: a page's blocks, a notebook's cells, or a model."""
    if source.endswith(".md"):
        page = ROOT / source
        return [(f"{page.name}[{i}]", b) for i, b in enumerate(_BLOCK.findall(page.read_text()))]
    if source.endswith(".ipynb"):
        import nbformat

        cells = [c for c in nbformat.read(ROOT / source, 4).cells if c.cell_type == "code"]
        return [(f"{Path(source).name}[{i}]", c.source) for i, c in enumerate(cells)]
    call = {
        "encoder": "fn, args = first_call._encoder()",
        "bert": "fn, args = models.make_bert(2, 128)",
        "resnet": "fn, args = first_call._resnet()",
    }[source]
    code = f"from bench import first_call, models\nimport eqsat\n{call}\neqsat.jit(fn)(*args)\n"
    return [(source, code)]


def _child(source: str) -> list[dict[str, Any]]:
    """Run ``source``'s code; every optimization it made."""
    import matplotlib

    matplotlib.use("Agg")
    import eqsat.api

    jit_module = importlib.import_module("eqsat.jit")  # eqsat.jit is the function

    made: list[dict[str, Any]] = []
    optimize_with = eqsat.api.optimize_with

    def recorded(program: Any, options: Any, *args: Any, **kwargs: Any) -> Any:
        result = optimize_with(program, options, *args, **kwargs)
        made.append(
            {
                "program": _digest(str(program)),
                "optimized": _digest(str(result.program)),
                "ops_after": len(result.program.live_ops()),
                "stop": str(result.report.stop_reason),
                "iterations": len(result.report.saturation.iterations),
                "cut_short": result.report.cut_short,
                "seconds": sum(result.report.timings.values()),
            }
        )
        return result

    eqsat.api.optimize_with = recorded
    jit_module.optimize_with = recorded  # it imports the function by name
    os.chdir(ROOT)
    namespace: dict[str, Any] = {"__name__": "__under_load__"}
    for name, code in _sources(source):
        exec(compile(code, name, "exec"), namespace)
    return made


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _run(source: str, cache_dir: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "EQSAT_CACHE_DIR": str(cache_dir),
        "EQSAT_ENABLE_CACHE": "0",
        "EQSAT_BACKGROUND": "0",
        "PYTHONWARNINGS": "ignore",
    }
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.under_load", "--child", source],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    seconds = time.perf_counter() - start
    if proc.returncode:
        return {"error": proc.stderr[-2000:], "seconds": seconds}
    return {"optimizations": json.loads(proc.stdout.strip().splitlines()[-1]), "seconds": seconds}


def _busy(n: int) -> list[subprocess.Popen[bytes]]:
    spin = "import time\nend = time.time() + 7200\nwhile time.time() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if "error" in a or "error" in b:
        return False
    return [o["optimized"] for o in a["optimizations"]] == [o["optimized"] for o in b["optimizations"]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--busy", type=int, default=6, help="busy processes beside the loaded runs")
    parser.add_argument("--only", help="comma-separated sources (README.md, docs/x.md, notebooks/x, a model)")
    opts = parser.parse_args(argv)
    if opts.child:
        print(json.dumps(_child(opts.child)))
        return
    sources = [str(p.relative_to(ROOT)) for p in (*PAGES, *NOTEBOOKS)] + list(MODELS)
    if opts.only:
        sources = [s for s in sources if s in opts.only.split(",")]
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for source in sources:
            quiet_dir, cold_dir = Path(tmp) / f"quiet-{len(rows)}", Path(tmp) / f"cold-{len(rows)}"
            quiet = _run(source, quiet_dir)
            reused = Path(tmp) / f"reused-{len(rows)}"
            if quiet_dir.exists():
                shutil.copytree(quiet_dir, reused)
            busy = _busy(opts.busy)
            try:
                time.sleep(1.0)
                loaded, cold = _run(source, reused), _run(source, cold_dir)
                load = os.getloadavg()[0]  # the last minute's: while the loaded runs ran
            finally:
                for p in busy:
                    p.kill()
            rows[source] = {
                "quiet": quiet,
                "loaded": loaded,
                "loaded_cold": cold,
                "load_average": load,
                "identical": _same(quiet, loaded),
                "identical_cold": _same(quiet, cold),
            }
            row = rows[source]
            count = len(quiet.get("optimizations", []))
            print(
                f"{source}: {count} optimizations, identical under load: {row['identical']}, "
                f"cold under load: {row['identical_cold']} (quiet {quiet['seconds']:.1f} s, "
                f"loaded {loaded['seconds']:.1f} s, load {load:.1f})",
                file=sys.stderr,
            )
    summary = {
        "sources": len(rows),
        "optimizations": sum(len(r["quiet"].get("optimizations", [])) for r in rows.values()),
        "identical": sum(r["identical"] for r in rows.values()),
        "identical_cold": sum(r["identical_cold"] for r in rows.values()),
        "cut_short": sum(
            bool(o["cut_short"])
            for r in rows.values()
            for run in ("quiet", "loaded", "loaded_cold")
            for o in r[run].get("optimizations", [])
        ),
        "errors": [
            s for s, r in rows.items() if any("error" in r[k] for k in ("quiet", "loaded", "loaded_cold"))
        ],
        "busy_processes": opts.busy,
    }
    path = write("under_load", {"summary": summary, "rows": rows})
    print(json.dumps(summary, indent=1))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
