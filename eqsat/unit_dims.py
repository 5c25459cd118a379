"""Unit dimensions are free: an exact layout canonicalization run before saturation.

Libraries add and move dims of size 1 freely (a batch of one squeezed by ``jnp.matmul``, the group
axis of ``jax.nn.dot_product_attention``, ``keepdims`` reductions), so one computation reaches the
e-graph in many layouts. This pass computes every elementwise op, reduction, softmax and the batch
dims of every matmul without the dims of size 1 they do not need, with reshapes (free views) around
them; reshape chains compose and cancel, a transpose that moves only dims of size 1 is a reshape,
and a sum or max over an axis of one element is that element (so it is one value with its other
uses). An ``iota`` (a tensor of its own indices, as masks are built) absorbs the reshapes, transposes
and broadcasts applied to it: it is made in the shape it is used in. The result computes the same
values bit for bit, and the rules see one layout.
"""

from __future__ import annotations

from eqsat.ir import Op, Program, Value
from eqsat.ops import OPS
from eqsat.types import FLOAT_DTYPES

_AXIS_OPS = frozenset({"reduce_max", "reduce_sum", "softmax"})
_WINDOW_OPS = frozenset({"conv2d", "conv2d_bias_act", "pool2d"})


def _windowed(program: Program) -> set[int]:
    """The values a conv or pooling reads or writes, and those elementwise ops between them compute:
    they keep their dims of size 1 (XLA:CPU copied a batch-1 conv's result reshaped to drop its batch
    dim: ResNet-18 at 224x224 ran 20% slower with its batch norms and activations squeezed)."""
    found = {id(v) for op in program.ops if op.name in _WINDOW_OPS for v in (*op.inputs, *op.outputs)}
    elementwise = [
        op for op in program.ops if op.name == "select" or (op.name in OPS and OPS[op.name].elementwise)
    ]
    changed = True
    while changed:
        changed = False
        for op in elementwise:
            values = [v for v in (*op.inputs, op.output) if v.type.shape == op.output.type.shape]
            if any(id(v) in found for v in values) and not all(id(v) in found for v in values):
                found.update(id(v) for v in values)
                changed = True
    return found


class _Rewriter:
    """Rebuilds a program op by op; ``env`` maps each old value to its new one."""

    def __init__(self, program: Program) -> None:
        self.new = Program(
            inputs=list(program.inputs),
            params=list(program.params),
            param_values=dict(program.param_values),
        )
        self.env: dict[int, Value] = {}
        self.source: dict[int, Value] = {}  # a reshape's result -> the value it reshapes
        self.iotas: dict[int, int] = {}  # an iota's result -> its dimension
        self.permutes: dict[int, tuple[Value, list[int]]] = {}  # a transpose's result -> permuted()'s args
        # values a transpose stays outermost for: a matmul's operands (rules fold it into the flags) and
        # an elementwise op's operand that broadcasts (rules match it against the other's transpose)
        self.operands = {id(v) for op in program.ops if op.name == "matmul" for v in op.inputs}
        self.operands |= {
            id(v)
            for op in program.ops
            if op.name in OPS and OPS[op.name].elementwise and len(op.inputs) == 2
            for v in op.inputs
            if v.type.shape != op.output.type.shape
        }
        self.windowed = _windowed(program)

    def iota(self, shape: tuple[int, ...], dimension: int, dtype: str) -> Value:
        out = self.new.add_op("iota", [], shape=shape, dimension=dimension, dtype=dtype)
        self.iotas[id(out)] = dimension
        return out

    def counts(self, v: Value) -> bool:
        """``v`` is an iota along a dim longer than 1 (one along a dim of 1 is zeros: not moved)."""
        return id(v) in self.iotas and v.type.shape[self.iotas[id(v)]] != 1

    def as_iota(self, v: Value, shape: tuple[int, ...]) -> Value:
        """An iota ``v`` broadcast to ``shape`` (right-aligned) is an iota of that shape."""
        dim = self.iotas[id(v)]
        return self.iota(shape, dim + len(shape) - v.type.rank, v.type.dtype)

    def get(self, v: Value) -> Value:
        return self.env.get(id(v), v)

    def reshape(self, v: Value, shape: tuple[int, ...], operand: bool = False) -> Value:
        """``v`` reshaped to ``shape``, composed with the reshape that made ``v`` if any (``operand``:
        the result is a matmul operand, see ``permuted``)."""
        if id(v) in self.permutes and v.type.shape != shape and _only_units(v.type.shape, shape):
            return self.permuted(*self.permutes[id(v)], shape, operand)
        base = self.source.get(id(v), v)
        if base.type.shape == shape:
            return base
        if self.counts(base) and _only_units(base.type.shape, shape):
            before = sum(1 for d in base.type.shape[: self.iotas[id(base)]] if d != 1)
            return self.iota(shape, [i for i, d in enumerate(shape) if d != 1][before], base.type.dtype)
        out = self.new.add_op("reshape", [base], shape=shape)
        self.source[id(out)] = base
        return out

    def emit(self, op: Op) -> None:
        ins = [self.get(v) for v in op.inputs]
        operand = len(op.outputs) == 1 and id(op.outputs[0]) in self.operands
        if op.name == "reshape":
            self.env[id(op.output)] = self.reshape(ins[0], tuple(op.attrs["shape"]), operand)  # type: ignore[arg-type]
            return
        if op.name == "transpose":
            perm = tuple(op.attrs["perm"])  # type: ignore[arg-type]
            if self.counts(ins[0]):
                out = self.iota(op.output.type.shape, perm.index(self.iotas[id(ins[0])]), ins[0].type.dtype)
            else:
                out = self.transpose(ins[0], perm, operand)  # type: ignore[arg-type]
            self.env[id(op.output)] = out
            return
        if op.name == "iota" or (op.name == "expand" and self.counts(ins[0])):
            dim = int(op.attrs["dimension"]) if op.name == "iota" else self.iotas[id(ins[0])]  # type: ignore[arg-type]
            rank_gain = 0 if op.name == "iota" else op.output.type.rank - ins[0].type.rank
            self.env[id(op.output)] = self.iota(op.output.type.shape, dim + rank_gain, op.output.type.dtype)
            return
        spec = OPS.get(op.name)
        if spec is not None and spec.elementwise and len(ins) == 2:
            out_shape = op.output.type.shape
            ins = [
                self.as_iota(v, out_shape) if self.counts(v) and v.type.shape != out_shape else v for v in ins
            ]
        squeezed = self.squeezed(op, ins)
        if squeezed is not None:
            self.env[id(op.output)] = self.reshape(squeezed, op.output.type.shape)
            return
        self.new.ops.append(Op(op.name, tuple(ins), op.attrs, op.outputs, op.payload))

    def transpose(self, x: Value, perm: tuple[int, ...], operand: bool) -> Value:
        """``x`` transposed: its dims that are not 1 permuted (none if only 1s move)."""
        out_shape = tuple(x.type.shape[a] for a in perm)
        return self.permuted(x, [a for a in perm if x.type.shape[a] != 1], out_shape, operand)

    def permuted(self, x: Value, order: list[int], shape: tuple[int, ...], operand: bool) -> Value:
        """``x`` as ``shape``, whose dims that are not 1 are x's axes ``order``, in that order: a
        reshape if they keep their order, else a transpose. For an ``operand`` (of a matmul, or one an
        elementwise op broadcasts) the transpose is outermost (of x reshaped to the 1s ``shape`` needs
        and its other dims, in order), so rules fold it into the matmul's flags or match it against the other
        operand's transpose; otherwise it applies to x (before reshapes that only moved 1s), so rules
        see a transposed product."""
        nonunit = sorted(order)
        if order == nonunit:
            return self.reshape(x, shape)
        base = self.source.get(id(x), x)
        if not operand and 1 not in base.type.shape and _only_units(base.type.shape, x.type.shape):
            moved = self.new.add_op("transpose", [base], perm=tuple(nonunit.index(a) for a in order))
            out = self.reshape(moved, shape)
        else:
            ones = [i for i, d in enumerate(shape) if d == 1]
            src = self.reshape(x, (*(1 for _ in ones), *(x.type.shape[a] for a in nonunit)))
            axes = iter(order)
            perm = tuple(
                ones.index(i) if d == 1 else len(ones) + nonunit.index(next(axes))
                for i, d in enumerate(shape)
            )
            out = self.new.add_op("transpose", [src], perm=perm)
        self.permutes[id(out)] = (x, order)
        return out

    def squeezed(self, op: Op, ins: list[Value]) -> Value | None:
        """``op`` computed without the dims of size 1 it does not need, or None if there are none."""
        spec = OPS.get(op.name)
        if spec is None or len(op.outputs) != 1:
            return None
        if op.name in _AXIS_OPS:
            return self._squeeze_axis_op(op, ins[0])
        if op.name == "expand":
            return self._expand(op, ins[0])
        if (spec.elementwise or op.name == "select") and id(op.output) not in self.windowed:
            out_rank = op.output.type.rank
            drop = {i for i, d in enumerate(op.output.type.shape) if d == 1}
            return self._apply(op, ins, drop, out_rank, op.attrs)
        if op.name == "matmul":
            batch = op.output.type.shape[:-2]
            drop = {i for i, d in enumerate(batch) if d == 1}
            return self._apply(op, ins, drop, len(batch) + 2, op.attrs, keep_last=2)
        return None

    def _apply(
        self,
        op: Op,
        ins: list[Value],
        drop: set[int],
        out_rank: int,
        attrs: dict,
        keep_last: int = 0,
    ) -> Value | None:
        """``op`` on inputs without the (output-aligned) dims in ``drop``; the last ``keep_last``
        dims of each input are never dropped."""
        if not drop:
            return None
        squeezed = []
        for v in ins:
            shape, offset = v.type.shape, out_rank - v.type.rank
            rank = len(shape)
            keep = tuple(d for j, d in enumerate(shape) if j >= rank - keep_last or (j + offset) not in drop)
            squeezed.append(self.reshape(v, keep))
        return self.new.add_op(op.name, squeezed, **attrs)

    def _expand(self, op: Op, x: Value) -> Value | None:
        """An expand without the output's unit dims, of ``x`` before a reshape that only prepended
        1s (expand prepends them itself)."""
        base = self.source.get(id(x), x)
        lead = x.type.rank - base.type.rank
        if lead > 0 and x.type.shape == (1,) * lead + base.type.shape:
            x = base
        out = op.output.type.shape
        drop = {i for i, d in enumerate(out) if d == 1}
        if not drop:
            return None if x is self.get(op.inputs[0]) else self.new.add_op("expand", [x], shape=out)
        return self._apply(op, [x], drop, len(out), {"shape": tuple(d for d in out if d != 1)})

    def _squeeze_axis_op(self, op: Op, x: Value) -> Value | None:
        axis = int(op.attrs["axis"])  # type: ignore[arg-type]
        if op.name != "softmax" and x.type.shape[axis] == 1:
            return self._one_element(op, x)
        drop = {i for i, d in enumerate(x.type.shape) if d == 1 and i != axis}
        if not drop:
            return None
        attrs = {**op.attrs, "axis": axis - sum(1 for i in drop if i < axis)}
        return self._apply(op, [x], drop, x.type.rank, attrs)

    def _one_element(self, op: Op, x: Value) -> Value | None:
        """A sum or max over an axis of one element: that element (a float sum plus 0, as the sum adds
        to its start, so that -0 is +0 after it), reshaped. The element is then the same value as its
        other uses: the e-graph shares it, and a gradient of the optimized program sums its cotangents
        before they pass through the ops that made it (not after each of two copies: through a cast
        to float32, 3e302 and -3e302 were inf and -inf, their sum NaN)."""
        if x.type.dtype == "bool":
            return None
        element = self.reshape(x, tuple(d for d in op.output.type.shape if d != 1))
        if op.name == "reduce_max" or x.type.dtype not in FLOAT_DTYPES:
            return element
        zero = self.new.add_op("full", [], shape=(), value=0.0, dtype=x.type.dtype)
        return self.new.add_op("add", [element, zero])


def _only_units(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Shapes ``a`` and ``b`` differ only in dims of size 1."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def drop_unit_dims(program: Program) -> Program:
    """``program`` computed without dims of size 1 where they are not needed (bitwise the same)."""
    rewriter = _Rewriter(program)
    for op in program.ops:
        rewriter.emit(op)
    new = rewriter.new
    for value, name in zip(program.outputs, program.output_names, strict=True):
        new.add_output(rewriter.get(value), name)
    new.ops = new.live_ops()
    return new
