"""Shared fixtures: paths of the bundled PIR programs."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pir"


@pytest.fixture
def pir_path():
    return lambda name: EXAMPLES / f"{name}.pir"
