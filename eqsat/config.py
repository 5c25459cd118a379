"""Settings, read from the environment at import and changed with ``eqsat.config.update`` (as
``jax.config``):

- ``cache_dir`` (``$EQSAT_CACHE_DIR``, default ``~/.cache/eqsat``): where optimized programs and
  measured kernel timings are kept;
- ``enable_cache`` (``$EQSAT_ENABLE_CACHE``, default on; ``0``/``false``/``no``/``off`` turn it off):
  whether ``optimize`` and ``eqsat.jit`` reuse optimized programs from earlier processes;
- ``cache_max_bytes`` (``$EQSAT_CACHE_MAX_BYTES``, default 256 MiB): the size the program cache is kept
  under, the least recently used entries removed first;
- ``kernel_seconds`` (``$EQSAT_KERNEL_SECONDS``, default 600): the safety net on how long one
  optimization may spend, before extraction, timing the kernels this device has not timed yet (apart
  from ``Limits.timeout_s``, which bounds the search)
  (``eqsat.cost.kernels``; 0: none, the roofline estimates them); the default of
  ``Limits.kernel_seconds``. Every kernel a choice needs is timed once and recorded, so the next run
  makes the same choice; a run this limit stops is cut short, and not cached;
- ``reproducible`` (``$EQSAT_REPRODUCIBLE``, default off): take no new measurement; every choice is
  made from the timings and verdicts recorded on this device (``cache_dir``) and the cost model alone,
  so a build gives the same programs wherever those records are the same;
- ``choose_compiler_options`` (``$EQSAT_CHOOSE_COMPILER_OPTIONS``, default on): where a program is given
  no compiler options and kernels may be timed, eqsat times it under XLA's alternatives for this
  platform too (``eqsat.xla_flags.ALTERNATIVES``: on CPU, oneDNN's convs) and runs it under the options
  it ran faster with (``OptimizeResult.compiler_options``); off: never;
- ``background`` (``$EQSAT_BACKGROUND``, default on): ``eqsat.jit``'s first call of a signature runs
  the function as written (as ``jax.jit`` would) while it is optimized in a background thread; later
  calls run the optimized program. Off: the first call waits for the optimization.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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
    kernel_seconds: float
    reproducible: bool
    choose_compiler_options: bool
    background: bool

    def update(self, name: str, value: Any) -> None:
        """Set one setting, converted to its type; an unknown name is a ``KeyError`` naming the known."""
        names = [f.name for f in fields(self)]
        if name not in names:
            raise KeyError(f"unknown setting {name!r} (known: {', '.join(names)})")
        current = getattr(self, name)
        if isinstance(current, bool):
            value = str(value).lower() not in _OFF if isinstance(value, str) else bool(value)
        elif isinstance(current, Path):
            value = Path(value).expanduser()
        else:
            value = type(current)(value)
        setattr(self, name, value)


def _from_environment() -> Config:
    config = Config(Path.home() / ".cache" / "eqsat", True, 256 * 2**20, 600.0, False, True, True)
    for name, variable in (
        ("cache_dir", "EQSAT_CACHE_DIR"),
        ("enable_cache", "EQSAT_ENABLE_CACHE"),
        ("cache_max_bytes", "EQSAT_CACHE_MAX_BYTES"),
        ("kernel_seconds", "EQSAT_KERNEL_SECONDS"),
        ("reproducible", "EQSAT_REPRODUCIBLE"),
        ("choose_compiler_options", "EQSAT_CHOOSE_COMPILER_OPTIONS"),
        ("background", "EQSAT_BACKGROUND"),
    ):
        if variable in os.environ:
            config.update(name, os.environ[variable])
    return config


config = _from_environment()


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (its folder made if need be) through a temporary file beside it,
    renamed into place: a reader, or another writer, sees the old file or the new one, never part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
