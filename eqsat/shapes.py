"""Shape rules: each infers an op's output shape in Python and states the same rule as egglog rules.

The Python side checks programs as they are built; the egglog side is the e-graph's shape analysis
(``(shape t)``), which guards rewrites and which makes a rule that equates tensors of different shapes
fail loudly ("Illegal merge"). Rank-dependent rules are generated for ranks up to ``MAX_RANK``; an op of
higher rank is encoded as opaque.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import NamedTuple

from eqsat.errors import ShapeError

MAX_RANK = 6
Shape = tuple[int, ...]
# An egglog shape rule: extra facts over the pattern's variables, and the shape expression.
EggRule = tuple[str, str]


def broadcast(a: Shape, b: Shape) -> Shape:
    """Numpy broadcasting of two shapes."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise ShapeError(f"shapes {a} and {b} do not broadcast")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def broadcasts_to(shape: Shape, target: Shape) -> bool:
    """``shape`` broadcasts to ``target`` itself (no dim of target grows, no rank is added to it)."""
    pairs = zip(reversed(shape), reversed(target), strict=False)
    return len(shape) <= len(target) and all(a in (1, b) for a, b in pairs)


def _egg_broadcast(a: str, ra: int, b: str, rb: int) -> list[str]:
    """egglog expressions of the broadcast dims of vectors ``a`` (rank ra) and ``b`` (rank rb)."""
    r = max(ra, rb)
    dims = []
    for i in range(r):
        ia, ib = i - (r - ra), i - (r - rb)
        ea = f"(vec-get {a} {ia})" if ia >= 0 else None
        eb = f"(vec-get {b} {ib})" if ib >= 0 else None
        # max(a, b), or 0 where one is 0 (a size-0 dim broadcast against 1)
        both = f"(* (max {ea} {eb}) (min (min {ea} {eb}) 1))"
        dims.append(both if ea and eb else ea or eb or "1")
    return dims


def vec(dims: Sequence[str]) -> str:
    return f"(vec-of {' '.join(dims)})" if dims else "(vec-empty)"


class ShapeRule:
    """Base: ``infer`` in Python, ``egglog`` as (facts, shape expression) pairs.

    A rule may need a helper table shared by several ops: ``prelude`` declares and fills it (once),
    ``demand`` is the action that asks for the entries an op needs.
    """

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        raise NotImplementedError

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        """``pattern`` maps names to egglog variables: ``s0``.. (input shapes), attribute names."""
        raise NotImplementedError

    def demand(self, pattern: dict[str, str]) -> str:
        return ""

    def prelude(self, ruleset: str) -> list[str]:
        return []


@dataclass(frozen=True)
class SameAs(ShapeRule):
    index: int = 0

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        return shapes[self.index]

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", pattern[f"s{self.index}"])]


@dataclass(frozen=True)
class FromAttr(ShapeRule):
    attr: str = "shape"

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        return tuple(attrs[self.attr])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", pattern[self.attr])]


@dataclass(frozen=True)
class Broadcast(ShapeRule):
    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        return broadcast(shapes[0], shapes[1])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [(f"(= b (broadcast-shape {pattern['s0']} {pattern['s1']}))", "b")]

    def demand(self, pattern: dict[str, str]) -> str:
        return f"(wants-broadcast-shape {pattern['s0']} {pattern['s1']})"

    def prelude(self, ruleset: str) -> list[str]:
        rules = [
            "(function broadcast-shape (IVec IVec) IVec :no-merge)",
            "(relation wants-broadcast-shape (IVec IVec))",
        ]
        for ra, rb in product(range(MAX_RANK + 1), repeat=2):
            rules.append(
                f"(rule ((wants-broadcast-shape a b) (= (vec-length a) {ra}) (= (vec-length b) {rb})) "
                f"((set (broadcast-shape a b) {vec(_egg_broadcast('a', ra, 'b', rb))})) :ruleset {ruleset})"
            )
        return rules


@dataclass(frozen=True)
class Permute(ShapeRule):
    attr: str = "perm"

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        perm = attrs[self.attr]
        if sorted(perm) != list(range(len(shapes[0]))):
            raise ShapeError(f"perm {list(perm)} is not a permutation of the {len(shapes[0])} dims")
        return tuple(shapes[0][p] for p in perm)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        s, p = pattern["s0"], pattern[self.attr]
        return [
            (f"(= (vec-length {p}) {r})", vec([f"(vec-get {s} (vec-get {p} {i}))" for i in range(r)]))
            for r in range(MAX_RANK + 1)
        ]


@dataclass(frozen=True)
class Matmul(ShapeRule):
    """``x @ y`` over the last two dims with transpose flags; batch dims broadcast."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        x, y = shapes
        if len(x) < 2 or len(y) < 2:
            raise ShapeError(f"matmul needs rank >= 2 operands, got {x} and {y}")
        m, kx = (x[-1], x[-2]) if attrs.get("transpose_x", 0) else (x[-2], x[-1])
        ky, n = (y[-1], y[-2]) if attrs["transpose_y"] else (y[-2], y[-1])
        if kx != ky:
            raise ShapeError(f"matmul contracts {kx} with {ky} (shapes {x} and {y})")
        return (*broadcast(x[:-2], y[:-2]), m, n)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        sx, sy, ty = pattern["s0"], pattern["s1"], pattern["transpose_y"]
        tx = pattern.get("transpose_x")  # absent: never transposed (linear)
        batch = f"(= b (broadcast-shape {_batch(sx)} {_batch(sy)}))"
        rules = []
        for fx, fy in product((0, 1), (0, 1)):
            if tx is None and fx:
                continue
            m = f"(vec-get {sx} (- (vec-length {sx}) {1 if fx else 2}))"
            n = f"(vec-get {sy} (- (vec-length {sy}) {2 if fy else 1}))"
            facts = f"{batch} (= {ty} {fy})" + (f" (= {tx} {fx})" if tx else "")
            rules.append((facts, f"(vec-push (vec-push b {m}) {n})"))
        return rules

    def demand(self, pattern: dict[str, str]) -> str:
        return f"(wants-broadcast-shape {_batch(pattern['s0'])} {_batch(pattern['s1'])})"

    def prelude(self, ruleset: str) -> list[str]:
        return Broadcast().prelude(ruleset)


def _batch(shape: str) -> str:
    """The batch dims of a matmul operand's shape (an egglog vector): all but the last two."""
    return f"(vec-pop (vec-pop {shape}))"


@dataclass(frozen=True)
class Attention(ShapeRule):
    """``softmax(where(mask, q kᵀ·scale + bias, fill)) v``: q (..., Sq, D), k (..., Sk, D),
    v (..., Sk, Dv) -> (..., Sq, Dv); k's and v's batch dims broadcast to q's (grouped-query attention:
    one kv head for a group of query heads), bias and mask broadcast to the scores (..., Sq, Sk)."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        q, k, v, bias, mask = shapes
        fits = len(q) == len(k) == len(v) >= 2 and all(broadcasts_to(t[:-2], q[:-2]) for t in (k, v))
        if not fits:
            raise ShapeError(
                f"attention needs q, k, v of one rank, k's and v's batch dims broadcasting to q's, "
                f"got {q}, {k}, {v}"
            )
        if q[-1] != k[-1] or k[-2] != v[-2]:
            raise ShapeError(f"attention of q {q}, k {k}, v {v}: head dims or key lengths differ")
        scores = (*q[:-1], k[-2])
        for name, shape in (("bias", bias), ("mask", mask)):
            if not broadcasts_to(shape, scores):
                raise ShapeError(f"attention {name} {shape} does not broadcast to the scores {scores}")
        return (*q[:-1], v[-1])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        q, v = pattern["s0"], pattern["s2"]
        return [("", f"(vec-set {q} (- (vec-length {q}) 1) (vec-get {v} (- (vec-length {v}) 1)))")]


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
        return [(f"(= cs (concat-shape {pattern['xs']} {pattern['axis']}))", "cs")]

    def demand(self, pattern: dict[str, str]) -> str:
        return f"(wants-concat-shape {pattern['xs']} {pattern['axis']})"

    def prelude(self, ruleset: str) -> list[str]:
        return [
            "(function concat-shape (TList i64) IVec :no-merge)",
            "(relation wants-concat-shape (TList i64))",
            f"(rule ((wants-concat-shape (TCons x r) a)) ((wants-concat-shape r a)) :ruleset {ruleset})",
            f"(rule ((wants-concat-shape l a) (= l (TCons x (TNil))) (= s (shape x))) "
            f"((set (concat-shape l a) s)) :ruleset {ruleset})",
            f"(rule ((wants-concat-shape l a) (= l (TCons x r)) (= sr (concat-shape r a)) (= s (shape x))) "
            f"((set (concat-shape l a) (vec-set s a (+ (vec-get s a) (vec-get sr a))))) :ruleset {ruleset})",
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
        return [("", f"(vec-set {p['s0']} {p['axis']} (vec-get {p['sizes']} {p['index']}))")]


@dataclass(frozen=True)
class Reduce(ShapeRule):
    """Reduction over one ``axis``, keeping it as size 1 when ``keepdim``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (x,) = shapes
        axis = attrs["axis"]
        return (*x[:axis], 1, *x[axis + 1 :]) if attrs["keepdim"] else (*x[:axis], *x[axis + 1 :])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        s, a, k = pattern["s0"], pattern["axis"], pattern["keepdim"]
        return [(f"(= {k} 1)", f"(vec-set {s} {a} 1)"), (f"(= {k} 0)", f"(vec-remove {s} {a})")]


# 2-D windows (conv2d, pool2d). ``layout`` NCHW: data (N, C, H, W), kernel (O, I, KH, KW); NHWC: data
# (N, H, W, C), kernel (KH, KW, I, O): the pairings of Paddle/PyTorch and of TensorFlow/flax.
class ConvAxes(NamedTuple):
    """Where a layout keeps each dim: of the data (channel, spatial) and of the kernel."""

    channel: int
    spatial: tuple[int, int]
    kernel_in: int
    kernel_out: int
    kernel_spatial: tuple[int, int]


CONV_AXES = {"NCHW": ConvAxes(1, (2, 3), 1, 0, (2, 3)), "NHWC": ConvAxes(3, (1, 2), 2, 3, (0, 1))}
LAYOUTS = tuple(CONV_AXES)


def window_out(size: int, k: int, lo: int, hi: int, stride: int, dilation: int = 1) -> int:
    """The output length of a window of ``k`` (dilated) sliding over ``size`` padded by lo, hi."""
    span = dilation * (k - 1) + 1
    if stride < 1 or dilation < 1 or min(lo, hi) < 0 or size + lo + hi < span:
        raise ShapeError(f"a window of {k} (dilation {dilation}) does not fit {size} padded by {lo}, {hi}")
    return (size + lo + hi - span) // stride + 1


def _egg_window_dims(pattern: dict[str, str], layout: str, kernel: Sequence[str], dilation: str) -> list[str]:
    """egglog expressions of the output dims of a 2-D window over ``pattern``'s data ``s0`` in
    ``layout``: ``kernel`` the window's sizes, ``dilation`` an IVec (or "" for none); channels kept."""
    x, p, st = pattern["s0"], pattern["padding"], pattern["strides"]
    dims = [f"(vec-get {x} {i})" for i in range(4)]
    for i, axis in enumerate(CONV_AXES[layout].spatial):
        lo, hi, stride = f"(vec-get {p} {2 * i})", f"(vec-get {p} {2 * i + 1})", f"(vec-get {st} {i})"
        span = f"(+ (* (vec-get {dilation} {i}) (- {kernel[i]} 1)) 1)" if dilation else kernel[i]
        dims[axis] = f"(+ (/ (- (+ (vec-get {x} {axis}) (+ {lo} {hi})) {span}) {stride}) 1)"
    return dims


def _window_attrs(attrs: dict) -> None:
    if len(attrs["strides"]) != 2 or len(attrs["padding"]) != 4:
        raise ShapeError(
            f"2-D window needs 2 strides and 4 paddings, got {attrs['strides']}, {attrs['padding']}"
        )


@dataclass(frozen=True)
class Conv2d(ShapeRule):
    """2-D convolution: output channels from the kernel, each spatial dim by ``window_out``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        x, w = shapes
        layout, groups = attrs["layout"], attrs["groups"]
        _window_attrs(attrs)
        if len(x) != 4 or len(w) != 4 or len(attrs["dilations"]) != 2:
            raise ShapeError(f"conv2d needs rank-4 data and kernel and 2 dilations, got {x} and {w}")
        axes = CONV_AXES[layout]
        ki, ko = w[axes.kernel_in], w[axes.kernel_out]
        channels = x[axes.channel]
        if groups < 1 or channels != ki * groups or ko % groups:
            raise ShapeError(f"conv2d of {channels} channels, kernel {w} ({layout}) and {groups} groups")
        out = list(x)
        out[axes.channel] = ko
        for i, (axis, kaxis) in enumerate(zip(axes.spatial, axes.kernel_spatial, strict=True)):
            pad = attrs["padding"][2 * i : 2 * i + 2]
            out[axis] = window_out(x[axis], w[kaxis], *pad, attrs["strides"][i], attrs["dilations"][i])
        return tuple(out)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        w = pattern["s1"]
        rules = []
        for layout in LAYOUTS:
            axes = CONV_AXES[layout]
            kernel = [f"(vec-get {w} {k})" for k in axes.kernel_spatial]
            dims = _egg_window_dims(pattern, layout, kernel, pattern["dilations"])
            dims[axes.channel] = f"(vec-get {w} {axes.kernel_out})"
            rules.append((f'(= {pattern["layout"]} "{layout}")', vec(dims)))
        return rules


@dataclass(frozen=True)
class Pool2d(ShapeRule):
    """2-D pooling over a ``window`` attribute: channels kept, each spatial dim by ``window_out``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (x,) = shapes
        _window_attrs(attrs)
        if len(x) != 4 or len(attrs["window"]) != 2:
            raise ShapeError(f"pool2d needs rank-4 data and a 2-D window, got {x} and {attrs['window']}")
        out = list(x)
        for i, axis in enumerate(CONV_AXES[attrs["layout"]].spatial):
            pad = attrs["padding"][2 * i : 2 * i + 2]
            out[axis] = window_out(x[axis], attrs["window"][i], *pad, attrs["strides"][i])
        return tuple(out)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        kernel = [f"(vec-get {pattern['window']} {i})" for i in range(2)]
        return [
            (f'(= {pattern["layout"]} "{layout}")', vec(_egg_window_dims(pattern, layout, kernel, "")))
            for layout in LAYOUTS
        ]


@dataclass(frozen=True)
class Conv2dBias(Conv2d):
    """A conv2d and a bias of its output channels."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        out = super().infer(shapes[:2], attrs)
        channels = out[CONV_AXES[attrs["layout"]].channel]
        if tuple(shapes[2]) != (channels,):
            raise ShapeError(f"conv2d bias {shapes[2]} must be ({channels},)")
        return out
