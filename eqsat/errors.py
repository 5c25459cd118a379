"""The exceptions eqsat raises; all derive from ``EqsatError``."""

from __future__ import annotations

from collections.abc import Mapping


class EqsatError(Exception):
    """Base class of every error eqsat raises on purpose."""


class ParseError(EqsatError):
    """Malformed program text: names the line, the op and the reason."""

    def __init__(self, reason: str, *, line: int | None = None, op: str | None = None) -> None:
        self.reason, self.line, self.op = reason, line, op
        where = f"line {line}: " if line is not None else ""
        what = f"{op}: " if op else ""
        super().__init__(f"{where}{what}{reason}")


class ShapeError(EqsatError):
    """An op's operands do not fit its shape or dtype rule."""


class UnsupportedError(EqsatError):
    """Something eqsat cannot represent (a dtype, a rank) and cannot pass through."""


class MiscompileError(EqsatError):
    """The optimized program computes something other than the original."""


class UnsoundRuleError(EqsatError):
    """A rule written by a user whose sides differ: ``inputs`` is the counterexample (by parameter
    name), ``lhs`` and ``rhs`` what each side computed from it."""

    def __init__(self, message: str, inputs: Mapping[str, object], lhs: object, rhs: object) -> None:
        super().__init__(message)
        self.inputs, self.lhs, self.rhs = dict(inputs), lhs, rhs
