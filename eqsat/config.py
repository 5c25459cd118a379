"""Settings, read from the environment at import and changed with ``eqsat.config.update`` (as
``jax.config``):

- ``cache_dir`` (``$EQSAT_CACHE_DIR``, default ``~/.cache/eqsat``): where optimized programs and
  measured kernel timings are kept;
- ``enable_cache`` (``$EQSAT_ENABLE_CACHE``, default on; ``0``/``false``/``no``/``off`` turn it off):
  whether ``optimize`` and ``eqsat.jit`` reuse optimized programs from earlier processes;
- ``cache_max_bytes`` (``$EQSAT_CACHE_MAX_BYTES``, default 256 MiB): the size the program cache is kept
  under, the least recently used entries removed first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

_OFF = {"0", "false", "no", "off"}


@dataclass
class Config:
    """eqsat's settings (see the module's docstring); ``update(name, value)`` changes one."""

    cache_dir: Path
    enable_cache: bool
    cache_max_bytes: int

    def update(self, name: str, value: Any) -> None:
        """Set one setting, converted to its type; an unknown name is a ``KeyError`` naming the known."""
        kinds = {f.name: f.type for f in fields(self)}
        if name not in kinds:
            raise KeyError(f"unknown setting {name!r} (known: {', '.join(kinds)})")
        current = getattr(self, name)
        if isinstance(current, bool):
            value = str(value).lower() not in _OFF if isinstance(value, str) else bool(value)
        elif isinstance(current, Path):
            value = Path(value).expanduser()
        else:
            value = int(value)
        setattr(self, name, value)


def _from_environment() -> Config:
    config = Config(Path.home() / ".cache" / "eqsat", True, 256 * 2**20)
    for name, variable in (
        ("cache_dir", "EQSAT_CACHE_DIR"),
        ("enable_cache", "EQSAT_ENABLE_CACHE"),
        ("cache_max_bytes", "EQSAT_CACHE_MAX_BYTES"),
    ):
        if variable in os.environ:
            config.update(name, os.environ[variable])
    return config


config = _from_environment()
