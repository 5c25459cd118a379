"""The package list, found rather than written out (pyproject.toml holds the rest): every package under
``eqsat/``, and each folder that ``package-dir`` in pyproject.toml installs under another name
(``rules/`` as ``eqsat.rules``, ``lowering/`` as ``eqsat.lowering``) with its packages. A package added
to any of them is installed without a change here (``tests/test_packaging.py`` builds the wheel and
imports all of it)."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = find_packages(str(ROOT), include=["eqsat", "eqsat.*"])
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        found += [package, *(f"{package}.{sub}" for sub in find_packages(str(ROOT / folder)))]
    return sorted(found)


setup(packages=packages())
