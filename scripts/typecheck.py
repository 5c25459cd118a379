"""Type-check eqsat as it is installed. ``eqsat.rules`` and ``eqsat.lowering`` live in ``rules/`` and
``lowering/`` (setuptools' ``package-dir`` in pyproject.toml), a mapping mypy cannot follow: this builds
the installed layout as symbolic links under ``build/typecheck/`` (``eqsat/``'s entries, and each
mapped folder where its package goes), runs mypy on it with pyproject.toml's settings, and reports
paths as they are in the repository. ``make lint`` and ``make test`` run it; arguments go to mypy."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"
PACKAGE = "eqsat"


def package_dirs() -> dict[str, str]:
    """Subpackages installed from another folder: ``{"eqsat.rules": "rules", ...}``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(config["tool"]["setuptools"]["package-dir"])


def link_tree() -> dict[str, str]:
    """Link the installed layout under ``TREE``; the mapped folders' paths there and in the repository."""
    top = TREE / PACKAGE
    top.mkdir(parents=True, exist_ok=True)
    for stale in top.iterdir():
        stale.unlink()
    for entry in (ROOT / PACKAGE).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    paths = {}
    for package, folder in package_dirs().items():
        installed = Path(*package.split("."))
        (TREE / installed).symlink_to(ROOT / folder)
        paths[f"{installed.as_posix()}/"] = f"{folder}/"
    return paths


def main(args: list[str]) -> int:
    paths = link_tree()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    command += ["--cache-dir", str(ROOT / ".mypy_cache"), *args, PACKAGE]
    done = subprocess.run(command, cwd=TREE, capture_output=True, text=True, check=False)
    for stream, text in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        for line in text.splitlines(keepends=True):
            for installed, folder in paths.items():
                if line.startswith(installed):
                    line = folder + line.removeprefix(installed)
            stream.write(line)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
