"""A measurement taken in a fresh Python process, so that nothing an earlier measurement left behind
(compiled programs, the heap, threads) changes it. Imports nothing heavy: the children are what load
JAX and eqsat."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


def child_json(module_args: Sequence[str], quiet: bool = True) -> dict[str, Any]:
    """The JSON object a fresh ``python -m <module_args>`` prints last on stdout. ``quiet``: its stderr
    is captured (and in the ``CalledProcessError`` raised where it fails), else passed through."""
    out = subprocess.run(
        [sys.executable, "-m", *module_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if quiet else None,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
