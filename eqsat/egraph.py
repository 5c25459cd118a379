"""Program <-> egglog: the schema derived from ``eqsat.ops``, the shape/dtype analyses, encoding, and
the serialized e-graph that extraction works on.

One egglog sort ``Tensor``, one constructor per canonical op (inputs first, then attributes as
primitives: ``i64``, ``IVec`` = ``Vec[i64]``, ``f64``, ``String``), plus ``Input`` for program inputs
and parameters and ``Opaque`` for ops no rule may touch. ``(shape t)`` and ``(dtype t)`` are e-class
analyses filled by rules in the ``analysis`` ruleset; they have no merge, so a rewrite that equates
tensors of different shapes fails loudly instead of miscompiling.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from eqsat.egglog_text import (
    ANALYSIS,
    REWRITES,
    Term,
    app,
    equal,
    let,
    literal,
    negative_zero,
    rule_command,
    set_to,
    tlist,
    union,
)
from eqsat.errors import EqsatError, ShapeError
from eqsat.ir import DTYPES, Op, Program, TensorType, Value
from eqsat.ops import EGG_SORT, FLOAT_DTYPES, OPS, VARIADIC, OpDef, folds, needs_opaque
from eqsat.ranges import DECLARATIONS as RANGE_DECLARATIONS
from eqsat.ranges import parameter_ranges
from eqsat.stacking import Alternative

if TYPE_CHECKING:
    from egglog import bindings  # imported where used: a first call that hits the cache needs no egglog

# egglog's Rust core logs every command at INFO through Python's logging: where another library (Paddle)
# has set the root logger to INFO, that is megabytes of stderr. Its loggers stay at WARNING unless the
# user set a level of their own.
for _name in ("egglog", "egglog_bridge", "egglog_experimental"):
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.WARNING)


def attribute_variable(attr: str) -> str:
    """The egglog pattern variable of an attribute (prefixed: attribute names clash with functions)."""
    return f"a_{attr}"


def pattern(op: OpDef) -> Term:
    """The constructor pattern of ``op`` over variables ``x0``.. (or ``xs``) and ``a_<attr>``."""
    ins = ["xs"] if op.arity == VARIADIC else [f"x{i}" for i in range(op.arity)]
    return Term(app(op.ctor, *ins, *(attribute_variable(a.name) for a in op.attrs)))


def _declaration(op: OpDef) -> str:
    ins = ["TList"] if op.arity == VARIADIC else ["Tensor"] * op.arity
    return app(op.ctor, *ins, *(EGG_SORT[a.kind] for a in op.attrs))


def _analysis_rules(op: OpDef) -> list[str]:
    matched = equal("t", pattern(op))
    if op.arity == VARIADIC:
        inputs: str = equal("xs", app("TCons", "x0", "rest"))
        names = {"xs": "xs"}
    else:
        inputs = " ".join(equal(f"s{i}", app("shape", f"x{i}")) for i in range(op.arity))
        names = {f"s{i}": f"s{i}" for i in range(op.arity)}
    names.update({a.name: attribute_variable(a.name) for a in op.attrs})
    rules = []
    demand = op.shape.demand(names)
    if demand:
        rules.append(rule_command((matched, inputs), (demand,), ANALYSIS))
    for k, (facts, expr) in enumerate(op.shape.egglog(names)):
        shape = set_to(app("shape", "t"), expr)
        rules.append(rule_command((matched, inputs, facts), (shape,), ANALYSIS, f"shape-{op.name}-{k}"))
    if isinstance(op.dtype, int):
        src = inputs if op.arity == VARIADIC else ""
        dtype_facts: tuple[str, ...] = (src, equal("d", app("dtype", f"x{op.dtype}")))
        dtype = "d"
    else:
        dtype_facts = ("",)
        dtype = literal(op.dtype) if op.dtype in DTYPES else attribute_variable(op.dtype)
    dtype_rule = (set_to(app("dtype", "t"), dtype),)
    rules.append(rule_command((matched, *dtype_facts), dtype_rule, ANALYSIS, f"dtype-{op.name}"))
    return rules


# Dtype families that rule guards name: ``(float-dtype (dtype x))``. ``half-float`` is half precision;
# ``wide-float`` excludes it, whose range a reassociated or rescaled computation overflows; ``reassociable``
# dtypes keep their values under reassociation and distribution up to rounding (wide floats) or exactly
# (integers wrap around: arithmetic modulo 2**n is a ring).
DTYPE_FAMILIES: dict[str, frozenset[str]] = {
    "float-dtype": FLOAT_DTYPES,
    "wide-float": frozenset({"float32", "float64"}),
    "half-float": frozenset({"float16", "bfloat16"}),
    "reassociable": frozenset({"float32", "float64"} | {d for d in DTYPES if "int" in d}),
    "int-dtype": frozenset(d for d in DTYPES if "int" in d),
}


def _dtype_families() -> list[str]:
    lines = []
    for family, dtypes in DTYPE_FAMILIES.items():
        lines.append(app("relation", family, "(String)"))
        lines.extend(app(family, literal(d)) for d in sorted(dtypes))
    return lines


@cache
def schema() -> str:
    """The egglog declarations and analysis rules, derived from the op registry."""
    ctors = " ".join(_declaration(op) for op in OPS.values())
    tensor = app("Tensor", app("Input", "String"), app("Opaque", "String", "TList", "i64"), ctors)
    tlists = app("TList", app("TNil"), app("TCons", "Tensor", "TList"))
    lines = [
        app("sort", "IVec", app("Vec", "i64")),
        app("datatype*", tensor, tlists),
        app("function", "shape", "(Tensor)", "IVec", ":no-merge"),
        app("function", "dtype", "(Tensor)", "String", ":no-merge"),
        *RANGE_DECLARATIONS,
        app("ruleset", ANALYSIS),
        app("ruleset", REWRITES),
        *_dtype_families(),
    ]
    lines.extend(dict.fromkeys(line for op in OPS.values() for line in op.shape.prelude(ANALYSIS)))
    for op in OPS.values():
        lines.extend(_analysis_rules(op))
    return "\n".join(lines)


@dataclass
class Encoding:
    """A program encoded as egglog commands, with what is needed to decode extracted terms."""

    commands: str
    roots: list[str]
    leaves: dict[str, Value] = field(default_factory=dict)
    opaque: dict[str, Op] = field(default_factory=dict)
    # per group of alternatives (``eqsat.stacking``): the name of the value they share, and of each
    # value one of them stands for
    groups: list[tuple[str, list[str]]] = field(default_factory=list)

    def chunks(self, size: int = 2000) -> Iterable[str]:
        """The commands, ``size`` at a time (one command a line): a load can stop between them."""
        lines = self.commands.split("\n")
        for i in range(0, len(lines), size):
            yield "\n".join(lines[i : i + size])


def typed_as(name: str, t: TensorType) -> tuple[str, str]:
    """Commands stating the shape and dtype of the global ``name``."""
    return set_to(app("shape", name), t.shape), set_to(app("dtype", name), literal(t.dtype))


def encode(program: Program, typed: bool = True, alternatives: Sequence[Alternative] = ()) -> Encoding:
    """One ``let`` per value in topological order (one nested expression would be quadratic); then
    each of ``alternatives`` (``eqsat.stacking``), its ops and a union with the value it equals.

    Every value's shape and dtype is stated (``typed``): the analysis then confirms them in one pass
    (a disagreement is an error) instead of deriving them one level of the program per pass. Without,
    only the leaves' and opaque ops' types are stated (to test the analysis). The ranges of parameters
    with values are stated too (``eqsat.ranges``): the folding rules' guards start from them."""
    names: dict[int, str] = {}
    cmds: list[str] = []
    enc = Encoding("", [])
    ranges = parameter_ranges(program)

    for v in (*program.inputs, *program.params):
        key = f"in{len(enc.leaves)}"
        enc.leaves[key] = v
        names[id(v)] = name = f"$v{len(names)}"
        cmds.append(let(name, app("Input", literal(key))))
        cmds.extend(typed_as(name, v.type))
    for p in program.params:
        known = ranges.get(p.name) if p.name else None
        if known is not None:
            cmds.extend(known.facts(names[id(p)]))

    def emit(op: Op) -> None:
        args = [names[id(v)] for v in op.inputs]
        if needs_opaque(op.name, op.attrs, (v.type.rank for v in (*op.inputs, *op.outputs))):
            key = f"op{len(enc.opaque)}"
            enc.opaque[key] = op
            for i, out in enumerate(op.outputs):
                names[id(out)] = name = f"$v{len(names)}"
                cmds.append(let(name, app("Opaque", literal(key), tlist(args), i)))
                cmds.extend(typed_as(name, out.type))
            return
        spec = OPS[op.name]
        ins = [tlist(args)] if spec.arity == VARIADIC else args
        attrs = {a.name: literal(op.attrs[a.name]) for a in spec.attrs}
        names[id(op.output)] = name = f"$v{len(names)}"
        if op.name == "full" and negative_zero(op.attrs["value"]):  # -0.0 is -(0.0), exactly
            cmds.append(let(name, app("Neg", app("Full", attrs["shape"], 0.0, attrs["dtype"]))))
        else:
            cmds.append(let(name, app(spec.ctor, *ins, *attrs.values())))
        if typed:
            cmds.extend(typed_as(name, op.output.type))

    for op in program.live_ops():
        emit(op)
    groups: dict[str, list[str]] = {}
    for alternative in alternatives:
        for op in alternative.ops:
            if id(op.output) not in names:
                emit(op)
        value = names[id(alternative.value)]
        cmds.append(union(value, names[id(alternative.ops[-1].output)]))
        groups.setdefault(names[id(alternative.shared)], []).append(value)
    enc.groups = list(groups.items())
    enc.roots = [names[id(v)] for v in program.outputs]
    enc.commands = "\n".join(cmds)
    return enc


def new_egraph() -> bindings.EGraph:
    """A fresh egglog e-graph with the schema loaded."""
    from egglog import bindings

    eg = bindings.EGraph()
    eg.parse_and_run_program(schema())
    return eg


_CTORS = {op.ctor: op for op in OPS.values()}
TENSOR_CTORS = frozenset({*_CTORS, "Input", "Opaque"})  # the tables of tensor e-nodes


@dataclass(frozen=True)
class Node:
    """One e-node of the serialized e-graph: an op (constructor name), child e-classes, its e-class."""

    id: str
    op: str
    children: tuple[str, ...]
    eclass: str


class Serialized:
    """The serialized e-graph (egglog's JSON): tensor e-nodes by class, analyses, primitive values."""

    def __init__(self, text: str) -> None:
        data = json.loads(text)
        raw = data["nodes"]
        cls_of = {nid: n["eclass"] for nid, n in raw.items()}
        self.classes: dict[str, list[Node]] = {}
        self.values: dict[str, Any] = {}
        self.roots: dict[str, str] = {}
        shapes: dict[str, str] = {}
        dtypes: dict[str, str] = {}
        for nid, n in raw.items():
            node = Node(nid, n["op"], tuple(cls_of[c] for c in n["children"]), n["eclass"])
            if nid.startswith("primitive-"):
                self.values[node.eclass] = node
            elif node.op == "shape":
                shapes[node.children[0]] = node.eclass
            elif node.op == "dtype":
                dtypes[node.children[0]] = node.eclass
            elif node.op in TENSOR_CTORS or node.op in ("TNil", "TCons"):
                self.classes.setdefault(node.eclass, []).append(node)
        for cid, meta in data["class_data"].items():
            for name in meta.get("let", "").split(", "):
                if name:
                    self.roots[name] = cid
        self.types: dict[str, TensorType] = {}
        for cid, sid in shapes.items():
            if cid in dtypes:
                try:
                    self.types[cid] = TensorType(self.value(sid), self.value(dtypes[cid]))
                except ShapeError:  # a term no program holds (a reshape to another size): untyped
                    continue
        self._drop_untyped()

    def _drop_untyped(self) -> None:
        """Keep only nodes whose class and tensor inputs have a type, and whose op accepts its inputs'
        types and gives its class's type. After a large iteration egglog can leave rows over stale
        class ids that no analysis rule matches (so they get no shape); they are equal to typed
        classes but cannot be told apart, so extraction never uses them. The analysis does not check
        operands against each other (a matmul of two dtypes); the Python rule does, so extraction
        never picks a node the program could not hold. The encoded program's classes are typed."""
        lists = {cid for cid, ns in self.classes.items() if ns[0].op in ("TNil", "TCons")}
        valid = set(self.types) | lists
        typed = {
            cid: [n for n in ns if cid in lists or self._well_typed(n)] for cid, ns in self.classes.items()
        }
        valid -= {cid for cid, ns in typed.items() if not ns}
        self.classes = {cid: ns for cid, ns in typed.items() if cid in valid}
        changed = True
        while changed:
            changed = False
            for cid in list(self.classes):
                nodes = [n for n in self.classes[cid] if all(c in valid for c in self._tensor_children(n))]
                if len(nodes) != len(self.classes[cid]):
                    changed = True
                    if nodes:
                        self.classes[cid] = nodes
                    else:
                        del self.classes[cid]
                        valid.discard(cid)

    def _well_typed(self, node: Node) -> bool:
        """A fixed-arity op's Python shape/dtype rule accepts its inputs and gives its class's type."""
        spec = spec_of(node)
        if spec is None or spec.arity == VARIADIC:
            return True
        types = [self.types.get(c) for c in node.children[: spec.arity]]
        if any(t is None for t in types):
            return True  # left to the untyped-input pass
        try:
            return spec.infer(types, attrs_of(self, node, spec)) == self.types[node.eclass]  # type: ignore[arg-type]
        except (ShapeError, KeyError, TypeError, ValueError, IndexError):  # a rule refusing odd inputs
            return False

    def _tensor_children(self, node: Node) -> list[str]:
        """The children of a node that are tensor or list classes (not primitive attributes)."""
        return [c for c in node.children if c not in self.values]

    def value(self, eclass: str) -> Any:
        """The primitive value of a primitive e-class (i64, f64, String or IVec)."""
        node = self.values[eclass]
        if node.op == "vec-of":
            return tuple(self.value(c) for c in node.children)
        if node.op == "vec-empty":
            return ()
        if node.id.startswith("primitive-String"):
            return json.loads(node.op)
        if node.id.startswith("primitive-f64"):
            return float(node.op)
        return int(node.op)

    def list_classes(self, eclass: str, choose: Any) -> list[str]:
        """The tensor classes of a TList class, following ``choose`` (class -> Node)."""
        out = []
        node = choose(eclass)
        while node.op == "TCons":
            out.append(node.children[0])
            node = choose(node.children[1])
        return out

    def constant_classes(self, enc: Encoding, values: Iterable[str]) -> frozenset[str]:
        """Classes XLA's constant folding computes at compile time: a leaf whose value is bound
        (``values``: names of params with values), and a foldable op (a concat, a reshape, an
        elementwise op) of those and of ``full``s. Ops of ``full``s alone are not: XLA keeps a
        broadcast scalar a broadcast rather than materialize it."""
        names = set(values)
        bound = {k for k, v in enc.leaves.items() if v.name in names}
        const: set[str] = set()
        fulls: set[str] = set()
        for cid, nodes in self.classes.items():
            for n in nodes:
                if n.op == "Input" and self.value(n.children[0]) in bound:
                    const.add(cid)
                elif n.op == "Full":
                    fulls.add(cid)
        changed = True
        while changed:
            changed = False
            for cid, nodes in self.classes.items():
                if cid in const:
                    continue
                for n in nodes:
                    spec = spec_of(n)
                    ins = set(input_classes(self, n, lambda c: self.classes[c][0]))
                    if spec is not None and folds(spec.name, ins, const, fulls):
                        const.add(cid)
                        changed = True
                        break
        return frozenset(const)

    @property
    def num_nodes(self) -> int:
        return sum(len(ns) for ns in self.classes.values())


def spec_of(node: Node) -> OpDef | None:
    """The op definition of a node's constructor (None for Input, Opaque and list nodes)."""
    return _CTORS.get(node.op)


def attrs_of(graph: Serialized, node: Node, spec: OpDef) -> dict[str, Any]:
    n_in = 1 if spec.arity == VARIADIC else spec.arity
    return {a.name: graph.value(c) for a, c in zip(spec.attrs, node.children[n_in:], strict=True)}


def input_classes(graph: Serialized, node: Node, choose: Any) -> list[str]:
    """The tensor classes a node reads, in operand order."""
    spec = spec_of(node)
    if node.op == "Opaque" or (spec is not None and spec.arity == VARIADIC):
        return graph.list_classes(node.children[1 if node.op == "Opaque" else 0], choose)
    if spec is None:
        return []
    return list(node.children[: spec.arity])


class _Rebuilder:
    """Builds the ops of a decoded Program: leaves, opaque ops (one op per key), canonical ops."""

    def __init__(self, enc: Encoding, original: Program) -> None:
        self.enc = enc
        self.out = Program(
            list(original.inputs),
            list(original.params),
            [],
            [],
            list(original.output_names),
            dict(original.param_values),
        )
        self.opaque: dict[str, Op] = {}

    def value(self, ctor: str, ins: list[Value], attrs: list[Any]) -> Value:
        """The value of constructor ``ctor`` applied to tensor inputs ``ins`` and primitive ``attrs``."""
        if ctor == "Input":
            return self.enc.leaves[attrs[0]]
        if ctor == "Opaque":
            key, index = attrs
            if key not in self.opaque:
                orig = self.enc.opaque[key]
                outs = tuple(Value(v.type) for v in orig.outputs)
                self.opaque[key] = Op(orig.name, tuple(ins), dict(orig.attrs), outs, orig.payload)
                self.out.ops.append(self.opaque[key])
            return self.opaque[key].outputs[index]
        spec = _CTORS[ctor]
        return self.out.add_op(spec.name, ins, **dict(zip((a.name for a in spec.attrs), attrs, strict=True)))


class CyclicChoice(EqsatError):
    """A choice of nodes whose program would read its own result (extractors never make one)."""


def decode(graph: Serialized, enc: Encoding, choose: Any, original: Program) -> Program:
    """Rebuild a Program from a choice of one node per class (``choose``: class -> Node).

    Iterative (an explicit stack, not recursion), so programs of any depth decode.
    """
    rebuild = _Rebuilder(enc, original)
    memo: dict[str, Value] = {}
    visiting: set[str] = set()
    for root in enc.roots:
        stack = [(graph.roots[root], False)]
        while stack:
            cid, expanded = stack.pop()
            if cid in memo:
                continue
            if cid not in graph.classes:  # every term of it was ill-typed (Serialized drops those)
                raise ShapeError(f"no term of e-class {cid} fits its op's type rule")
            node = choose(cid)
            inputs = input_classes(graph, node, choose)
            if not expanded:
                if cid in visiting:
                    raise CyclicChoice(f"the chosen node of class {cid} depends on itself")
                visiting.add(cid)
                stack.append((cid, True))
                stack.extend((c, False) for c in inputs if c not in memo)
                continue
            visiting.discard(cid)
            spec = spec_of(node)
            if node.op == "Input":
                attrs = [graph.value(node.children[0])]
            elif node.op == "Opaque":
                attrs = [graph.value(node.children[0]), graph.value(node.children[2])]
            else:
                assert spec is not None, node
                attrs = list(attrs_of(graph, node, spec).values())
            memo[cid] = rebuild.value(node.op, [memo[c] for c in inputs], attrs)
    rebuild.out.outputs = [memo[graph.roots[r]] for r in enc.roots]
    return rebuild.out


def extract_with_egglog(egraph: bindings.EGraph, enc: Encoding, original: Program) -> Program:
    """egglog's own extraction (tree cost, every node 1), kept as a reference for our extractors."""
    rebuild = _Rebuilder(enc, original)
    memo: dict[tuple[int, int], Any] = {}

    def build(dag: Any, term: int) -> Any:
        if (id(dag), term) in memo:
            return memo[id(dag), term]
        t = dag.get(term)
        if type(t).__name__ == "TermLit":
            result = t.value.value
        elif t.name == "vec-of":
            result = tuple(build(dag, a) for a in t.args)
        elif t.name == "vec-empty":
            result = ()
        elif t.name == "TNil":
            result = []
        elif t.name == "TCons":
            result = [build(dag, t.args[0]), *build(dag, t.args[1])]
        else:
            args = [build(dag, a) for a in t.args]
            spec = _CTORS.get(t.name)
            if t.name == "Opaque":  # (Opaque key inputs index)
                ins, attrs = args[1], [args[0], args[2]]
            elif spec is not None and spec.arity == VARIADIC:  # (Ctor inputs attrs...)
                ins, attrs = args[0], args[1:]
            else:  # Input has no tensor inputs
                n_in = spec.arity if spec is not None else 0
                ins, attrs = args[:n_in], args[n_in:]
            result = rebuild.value(t.name, ins, attrs)
        memo[id(dag), term] = result
        return result

    from egglog import bindings

    extracted = [
        _only(egraph.parse_and_run_program(app("extract", root)), bindings.ExtractBest) for root in enc.roots
    ]
    rebuild.out.outputs = [build(e.termdag, e.term) for e in extracted]  # all dags alive: ids stay unique
    return rebuild.out


def _only[T](outputs: list[Any], kind: type[T]) -> T:
    """The one output of an egglog command, of the kind it must be."""
    (out,) = outputs
    if not isinstance(out, kind):
        raise TypeError(f"egglog returned {type(out).__name__}, not {kind.__name__}")
    return out
