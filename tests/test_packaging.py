"""The wheel built from the repository works on its own: built offline with this environment's
setuptools (``pip wheel --no-build-isolation``) from a copy of what setuptools reads, installed into a
folder of its own, and run from another folder with that one first on ``PYTHONPATH`` (ahead of the
editable install, which would hide a module or a file the wheel leaves out). Every module of the
source tree is in it and imports, ``eqsat.__version__`` and ``--version`` give pyproject.toml's
version, and ``eqsat demo`` finds and optimizes the bundled programs (``eqsat.examples``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
# Where each package's files are in the repository (setuptools' package-dir in pyproject.toml).
FOLDERS = {"eqsat": "eqsat", **PYPROJECT["tool"]["setuptools"]["package-dir"]}

# Run in the installed copy: every module under eqsat imports, from the installed folder.
IMPORT_ALL = """
import importlib, pkgutil, sys
from pathlib import Path

import eqsat

target = Path(sys.argv[1]).resolve()
assert Path(eqsat.__file__).resolve().is_relative_to(target), eqsat.__file__

def fail(name):
    raise ImportError(f"cannot import {name}")

names = [m.name for m in pkgutil.walk_packages(eqsat.__path__, "eqsat.", onerror=fail)]
for name in names:
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().is_relative_to(target), (name, module.__file__)
print(eqsat.__version__)
print("\\n".join(names))
"""


def _source_modules() -> set[str]:
    """The modules of the source tree, as they are named once installed."""
    found = set()
    for package, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            name = ".".join((package, *path.relative_to(ROOT / folder).with_suffix("").parts))
            found.add(name.removesuffix(".__init__"))
    return found


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """The wheel's installation folder, an empty folder to run in, and the environment to run with."""
    tmp = tmp_path_factory.mktemp("packaging")
    # Build from a copy of what setuptools reads (as an sdist holds it), not the working tree: an
    # in-tree build leaves build/ behind, and files left there from before would go into the wheel.
    source = tmp / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (
        "pyproject.toml",
        "setup.py",
        PYPROJECT["project"]["readme"],
        *PYPROJECT["project"]["license-files"],
    ):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, source / folder, ignore=skip)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env.pop("PYTHONPATH", None)
    pip = [sys.executable, "-m", "pip", "-q"]
    wheels, target, elsewhere = tmp / "wheels", tmp / "target", tmp / "elsewhere"
    elsewhere.mkdir()
    _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(wheels), str(source)],
        tmp,
        env,
    )
    (wheel,) = wheels.glob("eqsat-*.whl")
    _run([*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)], tmp, env)
    # the cache of optimized programs stays out of the user's, as in the rest of the suite
    env |= {"PYTHONPATH": str(target), "EQSAT_ENABLE_CACHE": "0", "EQSAT_CACHE_DIR": str(tmp / "cache")}
    return target, elsewhere, env


def test_the_wheel_holds_every_module_and_each_imports(installed):
    target, elsewhere, env = installed
    out = _run([sys.executable, "-c", IMPORT_ALL, str(target)], elsewhere, env).splitlines()
    assert out[0] == VERSION
    assert set(out[1:]) | {"eqsat"} == _source_modules()
    assert (target / "eqsat" / "py.typed").is_file()
    bundled = {p.name for p in (ROOT / "eqsat" / "examples").glob("*.pir")}
    assert bundled and bundled == {p.name for p in (target / "eqsat" / "examples").glob("*.pir")}


def test_version_from_the_installed_package(installed):
    target, elsewhere, env = installed
    for command in (
        [sys.executable, "-m", "eqsat", "--version"],
        [sys.executable, "-m", "eqsat.cli", "--version"],
        [str(target / "bin" / "eqsat"), "--version"],  # the console script pip wrote
    ):
        assert _run(command, elsewhere, env).startswith(f"eqsat {VERSION} (egglog "), command


def test_the_demo_runs_on_the_bundled_programs(installed):
    _, elsewhere, env = installed
    out = _run([sys.executable, "-m", "eqsat", "demo"], elsewhere, env)
    bundled = sorted(p.name for p in (ROOT / "eqsat" / "examples").glob("*_before.pir"))
    assert len(bundled) >= 2
    assert [line.removeprefix("== ") for line in out.splitlines() if line.startswith("== ")] == bundled
    assert out.count("JAX outputs before/after agree") == len(bundled)
