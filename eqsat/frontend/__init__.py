"""Frontends: PIR text dumps, JAX functions and a Python builder, each producing a ``Program``."""
