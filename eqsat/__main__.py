"""``python -m eqsat``: the ``eqsat`` command (eqsat.cli)."""

import sys

from eqsat.cli import main

if __name__ == "__main__":
    sys.exit(main())
