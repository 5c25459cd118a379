"""The version of eqsat: the installed distribution's, else the source checkout's pyproject.toml."""

from __future__ import annotations


def _version() -> str:
    """The installed distribution's version; in a source checkout that is not installed, the version in
    its pyproject.toml; else ``0+unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("eqsat")
    except PackageNotFoundError:
        import tomllib
        from pathlib import Path

        try:
            pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
            project = tomllib.loads(pyproject.read_text())["project"]
            return str(project["version"]) if project["name"] == "eqsat" else "0+unknown"
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__: str = _version()
