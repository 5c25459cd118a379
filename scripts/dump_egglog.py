"""Print the egglog text of the schema and of every rule (the "all" selection): the artifact that a
refactoring of ops or rules must leave unchanged (compare two runs with diff)."""

from __future__ import annotations

from eqsat.egglog_text import REWRITES
from eqsat.egraph import schema
from eqsat.rules import select


def main() -> None:
    print(schema())
    for rule in select(["all"]):
        print(*rule.prelude, *rule.egglog(REWRITES), sep="\n")


if __name__ == "__main__":
    main()
