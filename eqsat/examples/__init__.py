"""The programs bundled with eqsat, which ``eqsat demo`` optimizes: Paddle PIR dumps in this folder
(``PIR``), each ``NAME_before.pir`` with ``NAME_after_reference.pir``, the output of PIR's own passes.
They are package data, so they are there wherever eqsat is installed::

    from eqsat.examples import PIR

    program = eqsat.load(PIR / "drr_transpose_before.pir")
"""

from __future__ import annotations

from pathlib import Path

PIR = Path(__file__).resolve().parent
"""The folder of the bundled PIR programs."""

__all__ = ["PIR"]
