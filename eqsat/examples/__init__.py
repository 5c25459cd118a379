"""The programs bundled with eqsat, in this folder (``PIR``): the Paddle PIR dumps ``eqsat demo``
optimizes, each ``NAME_before.pir`` with ``NAME_after_reference.pir``, the output of PIR's own passes;
and a small CNN saved by Paddle with a batch of None (``mini_conv_squeeze_dyn.json`` and its
``.pdiparams``). They are package data, so they are there wherever eqsat is installed::

    from eqsat.examples import PIR

    program = eqsat.load(PIR / "drr_transpose_before.pir")
"""

from __future__ import annotations

from pathlib import Path

PIR = Path(__file__).resolve().parent
"""The folder of the bundled programs."""

__all__ = ["PIR"]
