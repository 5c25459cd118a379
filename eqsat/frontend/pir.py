"""Paddle PIR text dumps -> ``Program``.

Paddle spellings map onto canonical ops; an op not listed here loads as an ``opaque`` op with its
attributes and declared result types, so nothing is refused. Quirks handled:

- ``pd.full_int_array`` / ``pd.full`` feeding a shape, axis or scale operand are read as constants;
- ``pd.reshape``: 0 keeps the input dim, -1 is inferred; its second (``xshape``) result is ignored;
- ``pd.expand`` of a ``pd.full`` to a shape that is not a valid broadcast (as in PIR's own DRR test,
  4x3x16 -> 4x3x16x16) loads as a ``full`` of the target shape: every element is the same value, which
  is also what PIR's pass folded it to. A non-broadcast expand of anything else is an error;
- ``pd.scale(x, s) {bias, bias_after_scale}`` with a constant ``s`` becomes ``scale``, else mul/add;
- ``builtin.combine`` + ``pd.concat(list, axis)`` become one ``concat``;
- ``pd.data`` is an input, ``pd.parameter`` a parameter, ``pd.fetch`` an output.

Every declared result type is checked against the inferred one; a mismatch names the line.

The reader and the op tables are in ``eqsat.frontend.paddle``: ``reader`` (the reading itself, opaque
ops, the tables), and a module per family of ops, each op's translation and JAX meaning side by side
(``values``, ``layout``, ``math``, ``nn``, ``control_flow``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from eqsat.errors import ParseError
from eqsat.frontend.paddle.reader import HANDLERS, UntranslatedError, _read, _Reader, claim_spellings
from eqsat.frontend.paddle_json import json_lines
from eqsat.frontend.paddle_params import Params, bind_params
from eqsat.ir import Program, Value
from eqsat.text import DYNAMIC_DEFAULT, Line, parse_lines, program_lines

__all__ = ["HANDLERS", "load", "parse_pir", "read_lines"]

claim_spellings()


def parse_pir(
    text: str, outputs: Sequence[str] | None = None, shapes: Mapping[str, Sequence[int]] | None = None
) -> Program:
    """Parse a Paddle PIR text dump into a ``Program``; errors name the line, the op and the reason.

    The outputs are the ``pd.fetch``ed values; a program without fetch (``print(main_program)``) has as
    outputs the values ``outputs`` names (``["%15"]``), or else every value no op reads. ``shapes`` binds
    the dynamic (-1) dims of inputs by name: eqsat optimizes for static shapes.
    """
    return read_lines(parse_lines(program_lines(text)), outputs, shapes)


def read_lines(
    lines: Iterable[Line],
    outputs: Sequence[str] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> Program:
    """The Program of PIR op lines, however they were written (text dump or saved JSON). Dynamic
    input dims ``shapes`` leaves unbound take ``DYNAMIC_DEFAULT``; the program can be read again at
    other sizes (``Program.specialize``)."""
    lines = list(lines)
    r = _Reader(shapes)
    try:
        produced = _read(r, lines)
    except ParseError as e:
        raise _with_shape_hint(e, r, shapes) from None
    inputs = [v.name for v in r.program.inputs]
    unknown = sorted(set(shapes or {}) - set(inputs))
    if unknown:
        raise ParseError(
            f"shapes names {unknown[0]!r}, which is no input of the program (its inputs: {inputs})"
        )
    if not r.program.outputs:
        _outputs_without_fetch(r, produced, outputs)
    if r.program.dynamic:
        r.program.specialize = lambda bound: read_lines(lines, outputs, {**(shapes or {}), **bound})
    return r.program


def _with_shape_hint(error: ParseError, r: _Reader, shapes: Mapping[str, Sequence[int]] | None) -> ParseError:
    """``error``, saying which inputs' dynamic dims were taken as ``DYNAMIC_DEFAULT`` for want of a
    size: a program that fails at those sizes needs them bound (an image's height and width)."""
    guessed = {name: declared for name, declared in r.program.dynamic.items() if name not in (shapes or {})}
    if not guessed or isinstance(error, UntranslatedError):
        return error
    which = ", ".join(f"{name!r} declared {list(d)}" for name, d in guessed.items())
    hint = (
        f"{error.reason} (the dynamic dims of {which} were taken as {DYNAMIC_DEFAULT}: bind them, "
        f"shapes={{{next(iter(guessed))!r}: (...)}} or --shape NAME=D0,D1,...)"
    )
    return ParseError(hint, line=error.line, op=error.op)


def _outputs_without_fetch(
    r: _Reader, produced: list[tuple[str, Value]], names: Sequence[str] | None
) -> None:
    if names is not None:
        for name in names:
            value = r.env.get(name)
            if not isinstance(value, Value):
                raise ParseError(f"output {name} is not a tensor value of the program")
            r.program.add_output(value, name.lstrip("%"))
        return
    for name, value in produced:
        if id(value) not in r.read and id(value) not in r.dynamic:
            r.program.add_output(value, name.lstrip("%"))
    if not r.program.outputs:
        raise ParseError("the program computes nothing: no pd.fetch and every value is read")


def load(
    path: str | Path, params: Params | None = None, shapes: Mapping[str, Sequence[int]] | None = None
) -> Program:
    """Load a program from a file: a PIR dump (``pd.*`` / ``pd_op.*`` ops), Paddle 3's saved program
    (``model.json``), or eqsat's own text form.

    ``params``: the weights — Paddle's ``.pdiparams`` file saved with the model (read without Paddle;
    for ``model.json``, ``model.pdiparams`` beside it is read by default), an ``.npz`` file or a dict
    of arrays by parameter name; they become the parameters' values. ``shapes`` binds inputs' dynamic
    (-1) dims by input name (``{"x": (8, 32)}``); unbound, they are 1 in the program returned, and
    ``eqsat.optimize(program).fn`` specializes on the shapes it is called with.
    """
    from eqsat.ir import parse_program

    if Path(path).suffix == ".py":
        raise ParseError(
            f"{path} is Python source: trace a function with eqsat.from_jax(fn, *args) or wrap it in "
            "eqsat.jit; load reads a PIR dump, a Paddle model.json or eqsat's text form"
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{path} is not UTF-8 text (byte {e.start}): not a program dump") from None
    pir = any(f'"{prefix}' in text for prefix in ("pd.", "pd_op.", "builtin.", "onednn_op."))
    if str(path).endswith(".json"):
        program = read_lines(json_lines(text), shapes=shapes)
    else:
        program = parse_pir(text, shapes=shapes) if pir else parse_program(text)
    if params is None and str(path).endswith(".json") and Path(path).with_suffix(".pdiparams").exists():
        params = Path(path).with_suffix(".pdiparams")  # saved beside the program, as Paddle saves it
    if params is not None:
        bind_params(program, params)
    return _with_weights(program)


def _with_weights(program: Program) -> Program:
    """The program, whose specializations (other sizes of its dynamic dims) keep its weights."""
    read = program.specialize
    if read is None:
        return program

    def specialize(shapes: Mapping[str, Sequence[int]]) -> Program:
        special = read(shapes)
        for name, value in program.param_values.items():  # the weights; its own constants stay its own
            special.param_values.setdefault(name, value)
        return _with_weights(special)

    program.specialize = specialize
    return program
