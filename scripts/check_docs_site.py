"""Check the built documentation site as a reader sees it: every page rendered by headless Chromium
(where it is installed: ``apt-get install chromium``), else read as built. No raw markup (reST roles,
mkdocstrings directives, unrendered double backticks), no link to a page or anchor that is not there.

``python scripts/check_docs_site.py [SITE]`` (default: ``site/``, from ``make docs``); ``--shots DIR``
saves a screenshot of each page. Exits 1 listing what it found. tests/test_docs.py runs it."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

RAW = re.compile(r":(?:class|func|mod|meth|attr|exc):`|^::: |(?<![`\w])``\w")


class _Page(HTMLParser):
    """The text a page shows (outside code), its links and its anchors."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.links: list[str] = []
        self.ids: set[str] = set()
        self._code = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"] or "")
        if tag == "a" and found.get("href"):
            self.links.append(found["href"] or "")
        if tag in ("code", "pre", "script", "style"):
            self._code += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("code", "pre", "script", "style"):
            self._code -= 1

    def handle_data(self, data: str) -> None:
        if not self._code:
            self.text.append(data)


def _render(page: Path, shots: Path | None) -> str:
    """The page's DOM after a browser ran it, or its HTML as built where there is no browser."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return page.read_text()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,1600"]
    if shots is not None:
        name = "_".join(page.parent.parts[-2:]) + ".png"
        shot = f"--screenshot={shots / name}"
        subprocess.run([*flags, shot, page.as_uri()], capture_output=True, timeout=60)
    out = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60)
    return out.stdout or page.read_text()


def check(site: Path, shots: Path | None = None) -> list[str]:
    """What is wrong with the built site, one line each."""
    pages = {p: _Page() for p in sorted(site.rglob("index.html")) if "search" not in p.parts}
    for path, parsed in pages.items():
        parsed.feed(_render(path, shots))
    problems = []
    for path, parsed in pages.items():
        where = path.relative_to(site)
        for line in "".join(parsed.text).splitlines():
            if RAW.search(line.strip()):
                problems.append(f"{where}: raw markup: {line.strip()[:100]!r}")
        for href in parsed.links:
            url = urlparse(href)
            if url.scheme or href.startswith("mailto:"):
                continue
            target = (path.parent / unquote(url.path)).resolve() if url.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"{where}: broken link {href!r}")
            elif url.fragment and target in pages and url.fragment not in pages[target].ids:
                problems.append(f"{where}: link to a missing anchor {href!r}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", default="site", help="the built site (default: site/)")
    parser.add_argument("--shots", type=Path, help="save a screenshot of each page here")
    args = parser.parse_args()
    if args.shots:
        args.shots.mkdir(parents=True, exist_ok=True)
    problems = check(Path(args.site).resolve(), args.shots)
    print("\n".join(problems) or "the site reads clean")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
