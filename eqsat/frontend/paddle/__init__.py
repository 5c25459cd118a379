"""Paddle's ops as eqsat reads them: ``reader`` reads PIR op lines into a Program; each family module
holds its ops' translations into canonical ops and, for those that stay opaque, their JAX meanings.
``eqsat.frontend.pir`` is the entry point (``load``, ``parse_pir``).

The families register their ops with the reader (``reader.handles``, ``reader.meaning``) as
``lax``'s primitives register their lowerings: here, once, when the package is imported, so the
reader never runs without them."""

from . import control_flow, layout, math, nn, values  # noqa: F401  (nn reads crf and rnn)
