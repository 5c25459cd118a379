"""Regenerate the listings the docs hold: docs/rules.md's from ``eqsat rules`` and docs/ops.md's from
``eqsat ops`` (the block after each page's heading). tests/test_docs.py fails until a rule or an op
added, renamed or reworded has been listed: run ``python scripts/update_listings.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
# page, its heading, the eqsat command whose output the block after the heading is
LISTINGS = (("rules.md", "## All rules", "rules"), ("ops.md", "## All ops", "ops"))
FENCE = "```text\n"


def printed(command: str) -> str:
    run = [sys.executable, "-m", "eqsat.cli", command]
    return subprocess.run(run, cwd=DOCS.parent, capture_output=True, text=True, check=True).stdout


def listing(text: str, heading: str) -> str:
    """The block after ``heading`` in a page's text."""
    return text.split(heading, 1)[1].split(FENCE, 1)[1].split("```", 1)[0]


def main() -> int:
    for page, heading, command in LISTINGS:
        path = DOCS / page
        text = path.read_text()
        old, new = listing(text, heading), printed(command)
        head, _, tail = text.partition(heading)
        path.write_text(head + heading + tail.replace(FENCE + old, FENCE + new, 1))
        print(f"{path.relative_to(DOCS.parent)}: {'unchanged' if old == new else 'updated'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
