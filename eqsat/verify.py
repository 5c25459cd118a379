"""Correctness checks: every rule numerically (``check_rule``), every optimization end to end
(``validate``: original vs optimized on random inputs).

``check_rule`` instantiates a rule's left-hand side from its example bindings, lets egglog apply the
rule (so guards, computed attributes and the shape analysis are exercised exactly as in optimization),
then evaluates every term now in the root e-class with JAX and compares it with the left-hand side.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import jax
import numpy as np

from eqsat.cost.models import NodeCount
from eqsat.egglog_text import ANALYSE, ANALYSIS, REWRITES, app, let, literal
from eqsat.egraph import Encoding, Serialized, decode, new_egraph, typed_as
from eqsat.errors import EqsatError, MiscompileError, ShapeError
from eqsat.extract import greedy_dag
from eqsat.ir import FLOAT_DTYPES, Op, Program, TensorType, Value
from eqsat.numerics import INPUT_KINDS, compare, judge, loosest, path_dtypes, random_array
from eqsat.ops import OPS
from eqsat.ranges import Range
from eqsat.rules import Rule
from eqsat.saturate import install
from eqsat.speed import arguments, random_arguments
from eqsat.xla_flags import CompilerOptions
from eqsat.xla_flags import jit as jit_in_force

_TOKEN = re.compile(r"[()\s]+|[^()\s]+")


def _substitute(pattern: str, binding: dict[str, str]) -> str:
    return "".join(binding.get(tok, tok) for tok in _TOKEN.findall(pattern))


@dataclass
class RuleCheck:
    """The outcome of checking one rule: how many rewritten terms were compared, on which LHS."""

    rule: str
    compared: int
    lhs: list[str]
    fired: bool = True


def _evaluate(program: Program, args: Sequence[Any]) -> tuple[Any, ...]:
    from eqsat.lowering import lower

    return lower(program)(*args)


def check_rule(
    rule: Rule, seed: int = 0, dtype: str | None = None, case: dict[str, Any] | None = None
) -> RuleCheck:
    """Apply ``rule`` to its example and check every resulting term agrees with the LHS numerically:
    on normal inputs, and for an exact rule also on special values (±0, ±inf, NaN, a -inf row), where
    infs and NaNs must match too; an inexact rule also on extreme ones (``EXTREME_KINDS``), where a
    finite result must stay finite and close wherever the rule's guards let it fire. ``dtype``
    replaces the example's float32 (tensors and dtype attributes), e.g. with float16 or int32; a rule
    whose guard excludes it need not fire then.
    ``case``: keyword arguments of the example (one of ``rule.cases``); the rule must fire on it.

    Raises ``MiscompileError`` on disagreement and ``EqsatError`` if the rule does not fire or its
    example binds not every pattern variable.
    """
    from egglog.bindings import EggSmolError

    rng = np.random.default_rng(seed)
    bindings = rule.bindings(rng, **(case or {}))
    if dtype is not None:
        bindings = {k: _with_dtype(v, dtype) for k, v in bindings.items()}
    wide = any(getattr(v, "dtype", v) in ("float64", "int64", "uint64") for v in bindings.values())
    with jax.enable_x64(wide or bool(jax.config.jax_enable_x64)):
        try:
            if rule.proposal is not None:
                return _check_proposal(rule, rng, bindings, dtype is None)
            return _check_example(rule, rng, bindings, dtype is None)
        except EggSmolError as error:
            unbound = re.search(r"Unbound symbol (\S+)", str(error))
            if unbound is None:
                raise
            raise EqsatError(
                f"rule {rule.name}: its example binds no {unbound[1]!r}, a variable of its patterns "
                f"(it binds {', '.join(sorted(map(str, bindings)))})"
            ) from error


# Inputs an inexact rule is checked on besides normal ones: magnitudes far apart (the whole range), large
# values with a small spread (cancellation), and zeros and the smallest normal numbers (a variance of 0)
EXTREME_KINDS = ("wide", "offset", "edge")


@dataclass
class _Example:
    """A rule's example as e-graph commands: its tensors as inputs of ``program`` (``leaves`` by
    name), every binding's egglog text (``egg``), and the left-hand sides to instantiate (``roots``)."""

    program: Program
    cmds: list[str]
    egg: dict[str, str]
    leaves: dict[str, Value]
    roots: tuple[str, ...]


def _example(rule: Rule, bindings: dict[str, Any]) -> _Example:
    program = Program()
    egg: dict[str, str] = {}
    cmds = []
    for name, value in bindings.items():
        if isinstance(value, TensorType):
            program.add_input(name, value)
            egg[name] = f"$in_{name}"
            cmds += [let(egg[name], app("Input", literal(name))), *typed_as(egg[name], value)]
        else:
            egg[name] = literal(value)
    leaves = {v.name: v for v in program.inputs if v.name}
    roots = tuple(dict.fromkeys(r for v in rule.variants for r in v.roots))
    return _Example(program, cmds, egg, leaves, roots)


def _check_example(
    rule: Rule, rng: np.random.Generator, bindings: dict[str, Any], must_fire: bool
) -> RuleCheck:
    """Check the rule on each kind of input, in an e-graph of its own that states the inputs' ranges
    (as a program's parameters with values have them): a range-guarded rule fires where they allow."""
    ex = _example(rule, bindings)
    extreme = tuple(k for k in EXTREME_KINDS if not (rule.assumes and k == "wide"))
    kinds = ("normal", "special") if rule.exact else ("normal", *extreme)
    compared, fired = 0, False
    for kind in kinds:
        args = [_drawn(v, rng, kind, v.name in rule.positive) for v in ex.program.inputs]
        ranges = [
            fact
            for v, a in zip(ex.program.inputs, args, strict=True)
            if v.type.dtype in FLOAT_DTYPES and (r := Range.of(np.asarray(a))) is not None
            for fact in r.facts(ex.egg[v.name or ""])
        ]
        n, grew = _check_roots(rule, replace(ex, cmds=[*ex.cmds, *ranges]), {kind: args}, bindings)
        compared += n
        fired |= grew and kind == "normal"
    if not fired and must_fire:
        raise EqsatError(f"rule {rule.name} did not fire on its example {bindings}")
    return RuleCheck(rule.name, compared, list(ex.roots), fired)


def _check_proposal(
    rule: Rule, rng: np.random.Generator, bindings: dict[str, Any], must_fire: bool
) -> RuleCheck:
    """Check each alternative a program rule proposes for its example program against the value it
    stands for, on each kind of input."""
    assert rule.proposal is not None
    program = rule.proposal.subject(bindings)
    alternatives = rule.proposal.propose(program)
    if not alternatives and must_fire:
        raise EqsatError(f"rule {rule.name} proposed nothing for its example {bindings}")
    extreme = tuple(k for k in EXTREME_KINDS if not (rule.assumes and k == "wide"))
    for kind in ("normal", "special") if rule.exact else ("normal", *extreme):
        args = [_drawn(v, rng, kind, v.name in rule.positive) for v in program.inputs]
        for alternative in alternatives:
            written, proposed = (_shell(program), _shell(program))
            written.ops, proposed.ops = program.live_ops(), [*program.live_ops(), *alternative.ops]
            written.outputs, proposed.outputs = [alternative.value], [alternative.ops[-1].output]
            precision = loosest(*path_dtypes(written), *path_dtypes(proposed))
            diff = compare(
                _evaluate(written, args)[0], _evaluate(proposed, args)[0], precision, strict=rule.exact
            )
            if diff is not None:
                raise MiscompileError(
                    f"rule {rule.name}: {alternative.reason}: the part standing for a value differs on "
                    f"{kind} inputs: {diff} (example {bindings})"
                )
    return RuleCheck(rule.name, len(alternatives), [a.reason for a in alternatives], bool(alternatives))


def example_programs(rule: Rule, seed: int = 0) -> list[Program]:
    """The left-hand sides of ``rule``'s variants instantiated on its example (those it fits), each a
    program of the example's tensors."""
    ex = _example(rule, rule.bindings(np.random.default_rng(seed)))
    _, lhs = _instantiate(new_egraph(), ex)
    return list(lhs.values())


def _instantiate(egraph: Any, ex: _Example) -> tuple[list[str], dict[str, Program]]:
    """Let every root in ``egraph``; the roots' names and the programs of those the example fits."""
    names = [f"$root{k}" for k in range(len(ex.roots))]
    lets = [let(n, _substitute(r, ex.egg)) for n, r in zip(names, ex.roots, strict=True)]
    egraph.parse_and_run_program("\n".join([*ex.cmds, *lets]))
    egraph.parse_and_run_program(ANALYSE)
    before = Serialized(egraph.serialize([]).to_json())
    choose = greedy_dag(before, NodeCount())
    lhs = {}
    for n in names:
        if before.roots[n] in before.types:
            try:
                lhs[n] = decode(before, Encoding("", [n], ex.leaves), choose, _shell(ex.program))
            except ShapeError:
                continue
    return names, lhs


def _drawn(v: Value, rng: np.random.Generator, kind: str, positive: bool) -> Any:
    data = random_array(v.type, rng, kind)
    return abs(data) if positive else data


def _with_dtype(value: Any, dtype: str) -> Any:
    """An example binding with float32 replaced by ``dtype`` (tensor types and dtype attributes)."""
    if isinstance(value, TensorType) and value.dtype == "float32":
        return TensorType(value.shape, dtype)
    return dtype if value == "float32" else value


def _check_roots(
    rule: Rule, ex: _Example, args: dict[str, list[Any]], bindings: dict[str, Any]
) -> tuple[int, bool]:
    """Instantiate every variant's roots in one e-graph, apply the rule once, compare every term of
    each root class with the root's value. A root the example does not fit (another variant's rank,
    exp of integers) is left out. A sound rule only merges classes of equal values, so sharing one
    e-graph among the variants hides nothing.

    Returns (terms compared, whether some root class gained a term).
    """
    egraph = new_egraph()
    names, lhs = _instantiate(egraph, ex)
    leaves, program, roots = ex.leaves, ex.program, ex.roots
    expected = {(n, kind): _evaluate(p, a)[0] for n, p in lhs.items() for kind, a in args.items()}
    install(egraph, [rule])
    egraph.parse_and_run_program(
        app("run-schedule", app("saturate", ANALYSIS), app("run", REWRITES), app("saturate", ANALYSIS))
    )
    after = Serialized(egraph.serialize([]).to_json())
    best = greedy_dag(after, NodeCount())
    compared, grew = 0, False
    for n, pattern in zip(names, roots, strict=True):
        if n not in lhs:
            continue
        rc = after.roots[n]
        grew |= len(after.classes[rc]) > 1
        ranked = None if rule.exact else _ranked(lhs[n])
        ranked_values = {kind: _evaluate(ranked[0], a)[0] for kind, a in args.items()} if ranked else {}
        for node in after.classes[rc]:
            if any(rc in best.uses(c) for c in node.children if c in after.classes):
                continue  # a cycle through the root itself (x = f(x)): not a term
            rewritten = decode(
                after,
                Encoding("", [n], leaves),
                lambda c, node=node, rc=rc: node if c == rc else best(c),
                _shell(program),
            )
            for kind, a in args.items():
                want, got = expected[n, kind], _evaluate(rewritten, a)[0]
                precision = loosest(*path_dtypes(lhs[n]), *path_dtypes(rewritten))
                if ranked is not None:
                    values = ranked_values[kind]
                    want, got = _held(values, want, ranked[1]), _held(values, got, ranked[1])
                diff = compare(want, got, precision, strict=rule.exact)
                if diff is not None:
                    raise MiscompileError(
                        f"rule {rule.name}: {pattern} rewrote to\n{rewritten}\nwhich differs on {kind} "
                        f"inputs: {diff} (example {bindings})"
                    )
            compared += 1
    return compared, grew


# Ops that keep positions positions along their axis: parts of them, their order reversed
_KEEPING_POSITIONS = frozenset({"split", "reverse"})


def _ranked(program: Program, output: int = 0) -> tuple[Program, Op] | None:
    """Where ``program``'s output computes positions (``OpDef.positions``: an argmax, top-k indices,
    a part of an argsort): the program of the values they rank, and the op that picks them."""
    made = {id(v): o for o in program.ops for v in o.outputs}
    op = made.get(id(program.outputs[output]))
    while op is not None and op.name in _KEEPING_POSITIONS:
        inner = made.get(id(op.inputs[0]))
        if inner is None or inner.attrs.get("axis") != op.attrs["axis"]:
            return None
        op = inner
    if op is None or not getattr(OPS.get(op.name), "positions", False):
        return None
    return replace(program, outputs=[op.inputs[0]], output_names=["ranked"]), op


def _held(values: Any, positions: Any, op: Op) -> np.ndarray:
    """The elements of ``values`` at ``positions`` along ``op``'s axis: what an inexact rule over
    positions must keep (a tie may be broken otherwise)."""
    axis = int(op.attrs["axis"])  # type: ignore[arg-type]
    picked = np.asarray(positions).astype(np.int64)
    if op.attrs.get("keepdim") == 0:
        picked = np.expand_dims(picked, axis)
    return np.take_along_axis(np.asarray(values), picked, axis)


def _shell(program: Program) -> Program:
    shell = Program(list(program.inputs), list(program.params))
    shell.output_names = ["out"]
    return shell


def validate(
    original: Program,
    optimized: Program,
    *,
    seed: int = 0,
    rules_fired: Sequence[str] | None = None,
    compile: bool = True,
    kinds: Sequence[str] = INPUT_KINDS,
    options: CompilerOptions | None = None,
) -> None:
    """Run both programs on random inputs of each kind (see ``random_array``) and judge every
    output of the optimized one against the original as it reads (see ``judge``: within the
    tolerance of the narrowest dtype on the original's path, or no further from it than the original
    as compiled).

    Where every rule that fired (``rules_fired``; None: not known) is exact, non-finite results must
    match too, on every kind of input.
    Where an inexact rule fired (reassociation, scale motion: fast-math rewrites), inf and NaN inputs
    and results may differ, but a finite result must stay finite and close, and positions (an argmax)
    must hold the same values of what the original ranks (a tie rounding made may be broken
    otherwise). ``compile=False`` runs the programs op by op (faster for many small programs);
    compiled, the optimized one runs under the compiler ``options`` (None: those in force), and is then
    held to the inexact standard (oneDNN's fused relu maps a NaN to 0).
    Raises ``MiscompileError`` naming the output, the input kind and the rules that fired.
    """
    from eqsat.lowering import lower, reference
    from eqsat.rules import ALL_RULES

    exactness = {r.name: r.exact for r in ALL_RULES}
    other_options = compile and options is not None
    exact = (
        not other_options
        and rules_fired is not None
        and all(exactness.get(name, False) for name in rules_fired)
    )
    rng = np.random.default_rng(seed)
    f, g = lower(original), lower(optimized)
    if compile:
        f, g = jit_in_force(f), jit_in_force(g, options)
    free = [p for p in original.params if p.name not in original.param_values]
    dtype, as_it_reads = loosest(*path_dtypes(original)), reference(original)
    # outputs of positions an inexact rule may have rewritten: compared by the values they hold
    rankings = {
        i: (lower(ranked[0]), ranked[1])
        for i in range(len(original.outputs))
        if not exact and (ranked := _ranked(original, i)) is not None
    }
    for kind in kinds:
        args = [random_array(v.type, rng, kind) for v in [*original.inputs, *free]]
        want, got, ref = f(*args), g(*args), as_it_reads(*args)
        for i, outputs in enumerate(zip(ref, want, got, strict=True)):
            compared: tuple[Any, ...] = outputs
            if i in rankings:
                values_of, op = rankings[i]
                values = values_of(*args)[0]
                compared = tuple(_held(values, positions, op) for positions in outputs)
            r, a, b = compared
            problem = judge(r, a, b, dtype, strict=exact)
            if problem is not None:
                raise MiscompileError(
                    f"output {i} ({original.output_names[i]}) on {kind} inputs: {problem}; "
                    f"rules fired: {', '.join(rules_fired or ()) or 'none'}"
                )


def disagreement_under(program: Program, options: CompilerOptions) -> str | None:
    """How ``program`` compiled under the compiler ``options`` disagrees with itself compiled under
    those in force, on normal random inputs, beyond the tolerance of its narrowest dtype; None where
    it agrees. A check on the compiler, not on a rewrite: an option that hands kernels to another
    library can hand them to a bug (XLA's oneDNN path computed a strided, dilated bfloat16 depthwise
    conv wrongly on an AMX CPU, past its first row of outputs)."""
    from eqsat.lowering import lower

    args = random_arguments(arguments(program))
    fn = lower(program)  # compiled ahead of time: this may run while another function is traced
    want, got = (jit_in_force(fn, o).lower(*args).compile()(*args) for o in (None, options))
    dtype = loosest(*path_dtypes(program))
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        problem = compare(a, b, dtype, strict=False)
        if problem is not None:
            return f"output {i} ({program.output_names[i]}): {problem}"
    return None
