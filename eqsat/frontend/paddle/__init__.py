"""Paddle's ops as eqsat reads them: ``reader`` reads PIR op lines into a Program; each family module
holds its ops' translations into canonical ops and, for those that stay opaque, their JAX meanings.
``eqsat.frontend.pir`` is the entry point (``load``, ``parse_pir``)."""
