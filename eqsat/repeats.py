"""Repeated layers: find the block a program repeats (a transformer's layers), so it is optimized
once and every copy is rewritten the same way.

A *cut* is a point in the program's op order where exactly one computed value is live (read later or
returned): between a model's layers, only the hidden state is. Cuts split the live ops into chunks;
a chunk's *signature* is its ops, attributes, types and wiring, with the value it reads from before the
cut and the program inputs and parameters it reads numbered in order of first use. The longest run of
consecutive identical groups of chunks (at least two copies of ``MIN_BLOCK_OPS`` ops or more) is the
repeated block; what precedes and follows it are a prefix and a suffix. Rewrites never cross a cut
between segments, so small programs (a chain of products to reassociate) are never split.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from eqsat.ir import Op, Program, Value

MIN_BLOCK_OPS = 24  # a repeated block this small is optimized with its neighbours instead
# the search for runs is cubic in the chunks at worst (0.3 s at 512): beyond this many (a 48-layer
# BERT has 441), the program is optimized whole, as before
MAX_CHUNKS = 512
Chunk = tuple[list[Op], Value | None, list[Value]]  # ops, the value read from before them, values after


@dataclass
class Segment:
    """Consecutive live ops, reading at most one value computed before them (``carry``) and program
    inputs and parameters (``externals``, in order of first use), producing ``outputs``."""

    ops: list[Op]
    carry: Value | None
    outputs: list[Value]
    externals: list[Value]


@dataclass
class Repeats:
    """A program as segments: an optional prefix, ``count`` copies of the block, an optional suffix."""

    program: Program
    segments: list[Segment]
    first: int  # index of the block's first copy in ``segments``
    count: int

    def representatives(self) -> list[Segment]:
        """The segments to optimize: the prefix, the block's first copy, the suffix."""
        return [s for i, s in enumerate(self.segments) if not self.first < i < self.first + self.count]

    def representative(self, index: int) -> Segment:
        """The segment optimized in place of segment ``index``."""
        copy = self.first <= index < self.first + self.count
        return self.segments[self.first] if copy else self.segments[index]

    def combined(self) -> tuple[Program, list[list[Value]]]:
        """The representatives side by side in one program, each reading an input of its own where
        it read its carry (so no rewrite crosses from one into the next); and each one's boundary
        values (that input, then the program inputs and parameters it reads)."""
        params = {id(p) for p in self.program.params}
        out = Program(param_values=dict(self.program.param_values))
        boundaries, seen = [], set()
        for index, segment in enumerate(self.representatives()):
            placeholder = []
            if segment.carry is not None:
                placeholder = [Value(segment.carry.type, f"carry{index}")]
                out.inputs.append(placeholder[0])
            rename = {id(segment.carry): placeholder[0]} if placeholder else {}
            for op in segment.ops:
                ins = tuple(rename.get(id(v), v) for v in op.inputs)
                out.ops.append(Op(op.name, ins, op.attrs, op.outputs, op.payload))
            for v in segment.externals:
                if id(v) not in seen:
                    seen.add(id(v))
                    (out.params if id(v) in params else out.inputs).append(v)
            for v in segment.outputs:
                out.add_output(rename.get(id(v), v))
            boundaries.append(placeholder + segment.externals)
        return out, boundaries

    def split(self, best: Program, boundaries: list[list[Value]]) -> dict[int, Part] | None:
        """``best`` (the combined program, optimized) cut back into one part per representative (by
        ``id``): the ops its outputs need. None if a part reads a value outside its own boundary."""
        producer = {id(v): op for op in best.ops for v in op.outputs}
        order = {id(op): i for i, op in enumerate(best.ops)}
        parts: dict[int, Part] = {}
        first_output = 0
        for segment, boundary in zip(self.representatives(), boundaries, strict=True):
            outputs = best.outputs[first_output : first_output + len(segment.outputs)]
            first_output += len(outputs)
            allowed = {id(v) for v in boundary}
            needed: dict[int, Op] = {}
            stack = list(outputs)
            while stack:
                v = stack.pop()
                op = producer.get(id(v))
                if op is None:
                    if id(v) not in allowed:
                        return None
                elif id(op) not in needed:
                    needed[id(op)] = op
                    stack.extend(op.inputs)
            ops = sorted(needed.values(), key=lambda op: order[id(op)])
            parts[id(segment)] = Part(ops, list(outputs), boundary)
        return parts

    def stitch(self, parts: dict[int, Part]) -> Program:
        """The whole program again, each segment replaced by its representative's optimized part on
        its own values."""
        out = Program(
            inputs=list(self.program.inputs),
            params=list(self.program.params),
            output_names=list(self.program.output_names),
            param_values=dict(self.program.param_values),
        )
        env: dict[int, Value] = {}  # a value of the original program -> the stitched program's
        for index, segment in enumerate(self.segments):
            part = parts[id(self.representative(index))]
            # the representative's boundary values stand for this copy's own
            pairs = zip(part.boundary, _boundary(segment), strict=True)
            binding = {id(r): env.get(id(s), s) for r, s in pairs}
            for op in part.ops:
                ins = tuple(binding.get(id(v), v) for v in op.inputs)
                outs = tuple(Value(v.type, v.name) for v in op.outputs)
                binding.update((id(o), n) for o, n in zip(op.outputs, outs, strict=True))
                out.ops.append(Op(op.name, ins, dict(op.attrs), outs, op.payload))
            for mine, theirs in zip(segment.outputs, part.outputs, strict=True):
                env[id(mine)] = binding.get(id(theirs), theirs)
        out.outputs = [env.get(id(v), v) for v in self.program.outputs]
        return out


@dataclass
class Part:
    """A representative segment, optimized: its ops, its outputs, and its boundary values (its carry's
    stand-in, then the program inputs and parameters it reads)."""

    ops: list[Op]
    outputs: list[Value]
    boundary: list[Value]


def _boundary(segment: Segment) -> list[Value]:
    return ([segment.carry] if segment.carry else []) + segment.externals


def find_repeats(program: Program) -> Repeats | None:
    """The program's repeated block, or None when no block of ``MIN_BLOCK_OPS`` ops repeats (or the
    program has more than ``MAX_CHUNKS`` chunks)."""
    chunks = _chunks(program)
    if not 2 <= len(chunks) <= MAX_CHUNKS:
        return None
    sizes = [len(ops) for ops, _, _ in chunks]
    kinds = _kinds(program)
    sigs = [hash(_signature(kinds, ops, carry)[0]) for ops, carry, _ in chunks]
    leading = list(itertools.accumulate(sizes, initial=0))  # ops before each chunk
    # (ops the run may cover, ops it covers for sure, start, period, copies, may the first layer be one)
    candidates = []
    for start, period, count in _runs(sigs, sizes, leading):
        block_ops = leading[start + period] - leading[start]
        maybe_first = leading[start] == block_ops and chunks[0][1] is None
        potential = (count + maybe_first) * block_ops
        candidates.append((potential, count * block_ops, start, period, count, maybe_first))
    candidates.sort(key=lambda c: (-c[0], c[3], c[2]))  # most ops first, then the shortest block
    best: tuple[int, int, int, Chunk | None] | None = None  # (ops covered, start, period, first layer)
    for potential, certain, start, period, count, maybe_first in candidates:
        if best is not None and potential <= best[0]:
            break
        first = None
        if maybe_first:  # the only candidates whose coverage needs a signature to know
            block = _join(chunks[start : start + period])
            first = _first_layer(program, kinds, chunks[:start], _signature(kinds, block[0], block[1])[0])
        covered = certain + (potential - certain if first is not None else 0)
        if count + (first is not None) >= 2 and (best is None or covered > best[0]):
            best = (covered, start, period, first)
    if best is None:
        return None
    _, start, period, first = best
    return _segments(program, kinds, chunks, start, period, first)


def _segments(
    program: Program, kinds: dict[int, str], chunks: list[Chunk], start: int, period: int, first: Chunk | None
) -> Repeats | None:
    """The program as prefix, copies of the block (``period`` chunks from ``start`` on, as many as
    repeat, after ``first`` if the first layer is one too) and suffix."""
    block_sig = _signature(kinds, *_join(chunks[start : start + period])[:2])[0]
    copies = [first] if first is not None else []
    end = start
    while end + period <= len(chunks):
        copy = _join(chunks[end : end + period])
        if _signature(kinds, copy[0], copy[1])[0] != block_sig:
            break
        copies.append(copy)
        end += period
    if len(copies) < 2:
        return None
    prefix, suffix = ([] if first is not None else chunks[:start]), chunks[end:]
    segments = [_segment(kinds, c) for c in ([_join(prefix)] if prefix else []) + copies]
    segments += [_segment(kinds, _join(suffix))] if suffix else []
    return Repeats(program, segments, 1 if prefix else 0, len(copies))


def _segment(kinds: dict[int, str], chunk: Chunk) -> Segment:
    ops, carry, outputs = chunk
    return Segment(ops, carry, outputs, _signature(kinds, ops, carry)[1])


def _join(chunks: list[Chunk]) -> Chunk:
    """Consecutive chunks as one."""
    return [op for ops, _, _ in chunks for op in ops], chunks[0][1], chunks[-1][2]


def _first_layer(program: Program, kinds: dict[int, str], chunks: list[Chunk], sig: tuple) -> Chunk | None:
    """``chunks`` (all those before the block) as one more copy of it, reading a program input where
    the block reads its carry, or None if no input makes it one. The layer that reads the program's
    input is cut finer than the others (an input, not computed, is not live between its reads)."""
    ops, _, outputs = _join(chunks)
    for v in program.inputs:
        if any(v in op.inputs for op in ops) and _signature(kinds, ops, v)[0] == sig:
            return ops, v, outputs
    return None


def _chunks(program: Program) -> list[Chunk]:
    """The live ops split at every cut: (ops, the value read from before, the value(s) after)."""
    ops = program.live_ops()
    defined = {id(v) for op in ops for v in op.outputs}
    last_use: dict[int, int] = {}
    for i, op in enumerate(ops):
        for v in op.inputs:
            last_use[id(v)] = i
    returned = {id(v) for v in program.outputs}
    live: dict[int, Value] = {}
    chunks: list[Chunk] = []
    begin, carry = 0, None
    for i, op in enumerate(ops):
        for v in op.outputs:
            live[id(v)] = v
        for v in op.inputs:
            if id(v) in defined and last_use[id(v)] == i and id(v) not in returned:
                live.pop(id(v), None)
        for v in op.outputs:
            if id(v) not in returned and id(v) not in last_use:
                live.pop(id(v), None)  # unread (one output of a multi-output op)
        if len(live) == 1 and i + 1 < len(ops) and not returned & live.keys():
            (value,) = live.values()
            chunks.append((ops[begin : i + 1], carry, [value]))
            begin, carry = i + 1, value
    chunks.append((ops[begin:], carry, list(program.outputs)))
    return chunks


def _signature(kinds: dict[int, str], ops: list[Op], carry: Value | None) -> tuple[tuple, list[Value]]:
    """What must be equal for two segments to be optimized alike, and the external values in order
    of first use. Opaque payloads are compared by identity (two copies of one JAX call may differ)."""
    local: dict[int, tuple] = {} if carry is None else {id(carry): ("carry",)}
    externals: list[Value] = []
    numbered: dict[int, int] = {}
    parts = []
    for op in ops:
        ins = []
        for v in op.inputs:
            if id(v) not in local and id(v) not in numbered:
                numbered[id(v)] = len(externals)
                externals.append(v)
            ins.append(local.get(id(v), ("external", numbered.get(id(v)))))
        for v in op.outputs:
            local[id(v)] = ("value", len(local))
        payload = None if op.payload is None else id(op.payload)
        types = tuple(v.type for v in op.outputs)
        parts.append((op.name, repr(sorted(op.attrs.items())), tuple(ins), types, payload))
    external_kinds = tuple((kinds.get(id(v), "computed"), v.type) for v in externals)
    return (tuple(parts), external_kinds), externals


def _kinds(program: Program) -> dict[int, str]:
    """What each program input and parameter is, by ``id``: input, parameter, or constant (a
    parameter with a known value)."""
    kinds = {id(v): "input" for v in program.inputs}
    kinds |= {id(p): "constant" if p.name in program.param_values else "parameter" for p in program.params}
    return kinds


def _runs(sigs: list[int], sizes: list[int], leading: list[int]) -> Iterator[tuple[int, int, int]]:
    """(start, period, copies) of the runs of identical consecutive groups of chunks of at least
    ``MIN_BLOCK_OPS`` ops: two copies or more, or one copy as long as all the ops before it (which may
    be one more copy, cut finer). ``leading[i]``: the ops before chunk ``i``."""
    n = len(sigs)
    for period in range(1, n + 1):
        for start in range(n - period + 1):
            block_ops = leading[start + period] - leading[start]
            if block_ops < MIN_BLOCK_OPS:
                continue
            copies = 1
            if start + 2 * period <= n and sigs[start] == sigs[start + period]:  # cheap test first
                block = sigs[start : start + period]
                while sigs[start + copies * period : start + (copies + 1) * period] == block:
                    copies += 1
            if copies >= 2 or leading[start] == block_ops:
                yield start, period, copies
