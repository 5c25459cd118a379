"""Progress of long optimizations: a bar over saturation iterations (tqdm's auto: a widget in notebooks,
text on a terminal's stderr), shown once an optimization has run ``delay`` seconds, and silent when
stderr is not a terminal outside a notebook."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eqsat.saturate import Iteration


class ProgressBar:
    """Call it with each saturation iteration; ``close()`` at the end. ``verbose`` also prints a line
    per iteration (e-graph size, matches, time). It counts iterations without a total: saturation ends
    when nothing more matches, usually long before ``Limits.max_iterations``."""

    def __init__(self, *, delay: float = 1.0, verbose: bool = False) -> None:
        from tqdm import tqdm as text_bar
        from tqdm.auto import tqdm

        options = {"total": None, "desc": "eqsat: saturating", "unit": "it", "leave": False, "delay": delay}
        try:
            self.bar = tqdm(file=sys.stderr, disable=None, **options)
        except ImportError:  # a notebook without ipywidgets: tqdm's text bar
            self.bar = text_bar(file=sys.stderr, disable=None, **options)
        self.verbose = verbose

    def __call__(self, it: Iteration) -> None:
        self.bar.update(1)
        self.bar.set_postfix(nodes=it.nodes, classes=it.classes, refresh=False)
        if self.verbose:
            fired = sum(it.matches.values())
            self.bar.write(
                f"  iteration {it.index}: {it.nodes} e-nodes, {it.classes} e-classes, {fired} matches, "
                f"{it.seconds * 1e3:.1f} ms",
                file=sys.stderr,
            )

    def close(self) -> None:
        self.bar.close()
