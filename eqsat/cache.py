"""The persistent cache of optimized programs: one JSON file per entry, never a pickle, so an entry can
hold no code. ``optimize`` looks an entry up by a key of everything that determines its result (see
``optimization_key``); an entry that is corrupt, truncated or written for another key is ignored with a
warning and rewritten. Writes are atomic (a temporary file renamed into place: two writers of one entry
leave one whole entry), and the directory is kept under a size bound, least recently used out first.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from eqsat.config import config, write_atomically
from eqsat.errors import EqsatError
from eqsat.ir import Program, TensorType, Value, parse_program
from eqsat.ranges import parameter_ranges
from eqsat.version import __version__

FORMAT = "eqsat-program-cache/1"
_PACKAGES = ("eqsat", "eqsat.rules", "eqsat.lowering")
_SUFFIX = ".json"


def _digest(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))  # a name from undecodable bytes still hashes
        h.update(b"\0")
    return h.hexdigest()


@functools.cache
def source_fingerprint() -> str:
    """The versions of eqsat, egglog, jax and jaxlib, and the size and modification time of each of
    eqsat's source files (its rules and lowerings, which live beside it, included): an edited checkout
    misses as a new release does."""
    specs = [find_spec(name) for name in _PACKAGES]
    roots = [Path(d) for spec in specs if spec for d in spec.submodule_search_locations or ()]
    files = sorted({p for root in roots for p in root.rglob("*.py")})
    versions = [f"eqsat {__version__}", *(f"{name} {version(name)}" for name in ("egglog", "jax", "jaxlib"))]
    stats = [(p, p.stat()) for p in files]
    return _digest([*versions, *(f"{p} {st.st_size} {st.st_mtime_ns}" for p, st in stats)])


def uncacheable(program: Program) -> str | None:
    """Why ``program`` cannot be cached (an op whose meaning is not in its text: an opaque op, a
    control-flow body), or None."""
    for op in program.ops:
        if op.payload is not None:
            return f"its op {op.name!r} carries what its text does not show"
    names = [p.name for p in program.params]
    if not all(names) or len(set(names)) < len(names):
        return "its parameters are not named apart"
    return None


def optimization_key(program: Program, parts: Sequence[str]) -> str:
    """The key of optimizing ``program``: its text (shapes, dtypes, attributes, constants), which of
    its parameters have values and their ranges (the folding rules' guards read them), its dynamic dims,
    ``parts`` (rules, cost model, limits, extractor:
    the caller's) and ``source_fingerprint()``."""
    bound = sorted(name for name in program.param_values)
    dynamic = sorted((name, list(shape)) for name, shape in program.dynamic.items())
    ranges = sorted((name, [r.lo, r.hi, r.tiny]) for name, r in parameter_ranges(program).items())
    fixed = [FORMAT, source_fingerprint(), str(program), json.dumps(bound), json.dumps(dynamic)]
    fixed.append(json.dumps(ranges))
    return _digest([*fixed, *parts])


class ProgramCache:
    """Entries ``<key>.json`` under ``directory`` (default: ``config.cache_dir / "programs"``)."""

    def __init__(self, directory: str | Path | None = None, max_bytes: int | None = None) -> None:
        self.directory = Path(directory) if directory else config.cache_dir / "programs"
        self.max_bytes = config.cache_max_bytes if max_bytes is None else max_bytes

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{_SUFFIX}"

    def get(self, key: str) -> dict[str, Any] | None:
        """The entry stored under ``key``, or None: missing, or unreadable (with a warning)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            warnings.warn(f"eqsat: cannot read cache entry {path}: {e}", RuntimeWarning, stacklevel=3)
            return None
        try:
            entry = json.loads(data.decode())
            if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
                raise ValueError("not an entry of this key and format")
        except ValueError as e:
            self.reject(key, str(e))
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: the size bound removes it last
        return entry

    def reject(self, key: str, reason: str) -> None:
        """Warn that the entry under ``key`` is unusable (it is rewritten by the next ``put``)."""
        warnings.warn(
            f"eqsat: ignoring cache entry {self.path(key)} ({reason}); it will be rewritten",
            RuntimeWarning,
            stacklevel=4,
        )

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry`` under ``key`` atomically, then trim the directory to ``max_bytes``. A cache
        that cannot be written is a warning, never an error."""
        try:
            write_atomically(self.path(key), json.dumps({"format": FORMAT, "key": key, **entry}))
        except OSError as e:
            message = f"eqsat: cannot write the program cache in {self.directory}: {e}"
            warnings.warn(message, RuntimeWarning, stacklevel=3)
            return
        self.trim()

    def annotate(self, key: str, name: str, value: Any) -> None:
        """Add ``name: value`` to the entry under ``key`` (one since removed or unreadable: nothing)."""
        entry = self.get(key)
        if entry is not None:
            self.put(key, {k: v for k, v in entry.items() if k not in ("format", "key")} | {name: value})

    def hint(self, name: str) -> Path:
        """A file whose presence says an entry was stored or read for ``name`` (a function, say): a
        later process can expect a hit for it before it has a key."""
        return self.directory / "hints" / _digest([name])

    def mark(self, name: str) -> None:
        """Leave ``hint(name)`` (a cache that cannot be written: nothing, silently)."""
        with contextlib.suppress(OSError):
            self.hint(name).parent.mkdir(parents=True, exist_ok=True)
            self.hint(name).touch()

    def entries(self) -> list[Path]:
        """The entry files, least recently used first."""
        if not self.directory.is_dir():
            return []
        paths = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            try:
                paths.append((path.stat().st_mtime, path))
            except FileNotFoundError:  # removed by another process meanwhile
                continue
        return [p for _, p in sorted(paths)]

    def size(self) -> int:
        return sum(_size(p) for p in self.entries())

    def trim(self) -> None:
        """Remove the least recently used entries until the directory holds at most ``max_bytes``."""
        entries = self.entries()
        total = sum(_size(p) for p in entries)
        for path in entries:
            if total <= self.max_bytes:
                break
            total -= _size(path)
            path.unlink(missing_ok=True)

    def clear(self) -> int:
        """Remove every entry (and stray temporary files); the number of entries removed."""
        entries = self.entries()
        for path in entries:
            path.unlink(missing_ok=True)
        if self.directory.is_dir():
            for path in [*self.directory.glob(".*.tmp"), *self.directory.glob("hints/*")]:
                path.unlink(missing_ok=True)
        return len(entries)

    def info(self) -> dict[str, Any]:
        """Where the cache is, whether it is on, its entries and their size, its bound."""
        return {
            "directory": str(self.directory),
            "enabled": config.enable_cache,
            "entries": len(self.entries()),
            "bytes": self.size(),
            "max_bytes": self.max_bytes,
        }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def bind(text: str, original: Program) -> Program:
    """The program of an entry, its parameters bound to ``original``'s values; a ``ValueError`` if it
    does not fit ``original`` (its inputs, its parameters by name and type, its outputs' types)."""
    try:
        program = parse_program(text)
    except EqsatError as e:
        raise ValueError(f"its program does not parse: {e}") from None

    def types(values: Iterable[Value], bound: bool | None = None) -> list[tuple[str | None, TensorType]]:
        """(name, type) of each value; of parameters, those with a value in ``original`` or without."""
        values = [v for v in values if bound is None or (v.name in original.param_values) == bound]
        return [(v.name, v.type) for v in values]

    declared = dict(types(original.params))
    if (
        types(program.inputs) != types(original.inputs)
        or types(program.params, bound=False) != types(original.params, bound=False)
        or any(declared.get(name) != t for name, t in types(program.params))
        or [v.type for v in program.outputs] != [v.type for v in original.outputs]
    ):
        raise ValueError("its program does not fit this one's inputs, parameters or outputs")
    program.param_values = {
        p.name: original.param_values[p.name] for p in program.params if p.name in original.param_values
    }
    program.dynamic = dict(original.dynamic)
    return program
