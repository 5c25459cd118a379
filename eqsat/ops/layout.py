"""Layout and view ops: transpose, reshape, expand (broadcast), concat, split, reverse — with their shape
rules, JAX lowerings and spellings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

import jax
import jax.numpy as jnp
from jax import lax

from eqsat.egglog_text import app, equal, rule_command, set_to, vec
from eqsat.errors import ShapeError
from eqsat.shapes import MAX_RANK, EggRule, FromAttr, Shape, ShapeRule, broadcasts_to

from .base import AXIS, VARIADIC, Attr, OpDef, no_flops, one_dtype

Array = jax.Array


@dataclass(frozen=True)
class Permute(ShapeRule):
    attr: str = "perm"
    rank_bounded = True

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        perm = attrs[self.attr]
        if sorted(perm) != list(range(len(shapes[0]))):
            raise ShapeError(f"perm {list(perm)} is not a permutation of the {len(shapes[0])} dims")
        return tuple(shapes[0][p] for p in perm)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        s, p = pattern["s0"], pattern[self.attr]
        return [
            (equal(app("vec-length", p), r), vec(app("vec-get", s, app("vec-get", p, i)) for i in range(r)))
            for r in range(MAX_RANK + 1)
        ]


@dataclass(frozen=True)
class Reshape(FromAttr):
    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        target = tuple(attrs[self.attr])
        if prod(target) != prod(shapes[0]):
            raise ShapeError(f"cannot reshape {shapes[0]} ({prod(shapes[0])} elements) to {target}")
        return target


@dataclass(frozen=True)
class Expand(FromAttr):
    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        target = tuple(attrs[self.attr])
        if not broadcasts_to(shapes[0], target):
            raise ShapeError(f"cannot expand {shapes[0]} to {target}: not a broadcast")
        return target


@dataclass(frozen=True)
class Concat(ShapeRule):
    """Concatenation of a list along ``axis``; egglog reads the helper table ``concat-shape``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        axis = attrs["axis"]
        first = shapes[0]
        for s in shapes[1:]:
            if len(s) != len(first) or any(
                a != b for i, (a, b) in enumerate(zip(s, first, strict=True)) if i != axis
            ):
                raise ShapeError(f"concat along axis {axis} of mismatched shapes {list(shapes)}")
        return (*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [(equal("cs", app("concat-shape", pattern["xs"], pattern["axis"])), "cs")]

    def demand(self, pattern: dict[str, str]) -> str:
        return app("wants-concat-shape", pattern["xs"], pattern["axis"])

    def prelude(self, ruleset: str) -> list[str]:
        wants, shape = app("wants-concat-shape", "l", "a"), equal("s", app("shape", "x"))
        first = equal("l", app("TCons", "x", app("TNil")))
        rest = (equal("l", app("TCons", "x", "r")), equal("sr", app("concat-shape", "r", "a")), shape)
        summed = app("vec-set", "s", "a", app("+", app("vec-get", "s", "a"), app("vec-get", "sr", "a")))
        return [
            app("function", "concat-shape", "(TList i64)", "IVec", ":no-merge"),
            app("relation", "wants-concat-shape", "(TList i64)"),
            rule_command(
                (app("wants-concat-shape", app("TCons", "x", "r"), "a"),),
                (app("wants-concat-shape", "r", "a"),),
                ruleset,
            ),
            rule_command((wants, first, shape), (set_to(app("concat-shape", "l", "a"), "s"),), ruleset),
            rule_command((wants, *rest), (set_to(app("concat-shape", "l", "a"), summed),), ruleset),
        ]


@dataclass(frozen=True)
class SplitPart(ShapeRule):
    """Part ``index`` of splitting along ``axis`` into ``sizes``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (x,) = shapes
        axis, sizes, index = attrs["axis"], attrs["sizes"], attrs["index"]
        if sum(sizes) != x[axis] or not 0 <= index < len(sizes):
            raise ShapeError(f"split of dim {x[axis]} into {list(sizes)} (part {index}) does not fit")
        return (*x[:axis], sizes[index], *x[axis + 1 :])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        p = pattern
        return [("", app("vec-set", p["s0"], p["axis"], app("vec-get", p["sizes"], p["index"])))]


def _split(x: Array, *, axis: int, sizes: tuple[int, ...], index: int) -> Array:
    start = sum(sizes[:index])
    return lax.slice_in_dim(x, start, start + sizes[index], axis=axis)


LAYOUT = [
    OpDef(
        "transpose",
        1,
        "permute dims: out.shape[i] = x.shape[perm[i]]",
        (Attr("perm", "ints"),),
        Permute(),
        flops=no_flops,
        fusion="loop",
        # XLA:CPU moves a (1, 64, 112, 112) float32 transpose in 0.57 ms, 8x the roofline's streaming
        # estimate: a conv's layout switch is weighed with the transposes it takes timed
        timed=True,
        lower=lambda x, *, perm: jnp.transpose(x, perm),
    ),
    OpDef(
        "reshape",
        1,
        "same elements, new shape (concrete dims)",
        (Attr("shape", "ints"),),
        Reshape(),
        flops=no_flops,
        view=True,
        lower=lambda x, *, shape: jnp.reshape(x, shape),
    ),
    OpDef(
        "expand",
        1,
        "broadcast to shape",
        (Attr("shape", "ints"),),
        Expand(),
        flops=no_flops,
        view=True,
        lower=lambda x, *, shape: jnp.broadcast_to(x, shape),
    ),
    OpDef(
        "concat",
        VARIADIC,
        "concatenate along axis",
        (AXIS,),
        Concat(),
        flops=no_flops,
        axis_attr="axis",
        check=one_dtype,
        fusion="loop",
        lower=lambda *xs, axis: jnp.concatenate(xs, axis=axis),
    ),
    OpDef(
        "split",
        1,
        "part `index` of splitting along axis into sizes",
        (AXIS, Attr("sizes", "ints"), Attr("index", "int")),
        SplitPart(),
        flops=no_flops,
        view=True,
        axis_attr="axis",
        lower=_split,
    ),
]


REVERSE = OpDef(
    "reverse",
    1,
    "the elements along axis in reverse order (``x[..., ::-1]``, ``lax.rev``)",
    (AXIS,),
    flops=no_flops,
    axis_attr="axis",
    fusion="loop",
    lower=lambda x, *, axis: lax.rev(x, (axis,)),
)
