"""What XLA runs: the fusion groups it forms from a program's ops (each one kernel XLA compiles), and
the phases each group runs as.

XLA fuses a loop op (elementwise, transpose, concat, select: ``OpDef.fusion_kind``) into the ops that
read it, and loop ops into the first pass of a reduction (an input fusion); views move no data. A
group's first kernel reads what enters the group once and its intermediate values never reach memory.
A cheap loop op read by several loops is computed again in each (XLA duplicates such producers); one
read by several reductions, an expensive one, or a program output is a kernel of its own. Dots,
convs and fused attention are kernels of their own: XLA fuses no producer into them but a transposed
operand, and XLA:CPU no consumer either (a bias and activation run as a loop after the product).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from eqsat.devices import Device
from eqsat.ir import Op, Program, TensorType, Value
from eqsat.ops import OPAQUE, OPS, Kernel
from eqsat.ops.base import Fusion

from .models import CostModel, Roofline, error_over, folded_ops, phases, profile


def fusion_kind(op: Op) -> Fusion:
    """An op's kind for fusion; opaque ops are kernels of their own."""
    return "kernel" if op.name == OPAQUE else OPS[op.name].fusion_kind


def _phases(op: Op, device: Device | None = None) -> list[Kernel]:
    return phases(op.name, op.attrs, [v.type for v in op.inputs], op.outputs[0].type, device)


@dataclass
class Group:
    """One kernel or chain of kernels XLA runs: ``root`` and the loop ops fused into it."""

    root: Op
    members: list[Op] = field(default_factory=list)

    @property
    def takes_producers(self) -> bool:
        return fusion_kind(self.root) in ("loop", "reduce")


class Fused:
    """The fusion groups of ``program`` (``groups``) and the phases they run as. ``epilogues``: the
    backend applies a dot's or conv's bias and activation in the same kernel (GPU); XLA:CPU runs them
    as a loop over the result, after the product. ``device``: where an op runs on a kernel of the
    device's own (``Device.kernels``)."""

    def __init__(self, program: Program, epilogues: bool = False, device: Device | None = None) -> None:
        self.epilogues = epilogues
        self.device = device
        self.live = program.live_ops()
        self.folded = folded_ops(program)[0]
        self.producer: dict[int, Op] = {id(v): op for op in self.live for v in op.outputs}
        self.readers: dict[int, list[Op]] = {}
        for op in self.live:
            for v in op.inputs:
                self.readers.setdefault(id(v), []).append(op)
        self.outputs = {id(v) for v in program.outputs}
        self.into_dots = {id(op) for op in self.live if self._swaps_into_dots(op)}
        self.groups: list[Group] = []
        self._form_groups()

    def _swaps_into_dots(self, op: Op) -> bool:
        """A transpose of the last two dims read only by products: XLA folds it into their
        contraction dims (a transposed operand)."""
        if op.name != "transpose" or id(op.outputs[0]) in self.outputs:
            return False
        rank = op.outputs[0].type.rank
        swap = (*range(rank - 2), rank - 1, rank - 2)
        readers = self.readers.get(id(op.outputs[0]), [])
        return tuple(op.attrs["perm"]) == swap and all(  # type: ignore[arg-type]
            r.name != OPAQUE and OPS[r.name].contraction == "dot" for r in readers
        )

    @staticmethod
    def _duplicable(op: Op, groups: Iterable[Group]) -> bool:
        """Whether XLA computes ``op`` again in each of several ``groups`` that read it: a cheap op,
        read by loops only (a reduction reads its operand once, from memory)."""
        return not OPS[op.name].expensive and all(fusion_kind(g.root) == "loop" for g in groups)

    def _is_free(self, op: Op) -> bool:
        return id(op) in self.folded or id(op) in self.into_dots or fusion_kind(op) == "free"

    def _kernel_readers(self, value: Value) -> Iterator[Op]:
        """The ops that read ``value``, seen through views."""
        for op in self.readers.get(id(value), []):
            if self._is_free(op) and id(op) not in self.folded:
                for out in op.outputs:
                    yield from self._kernel_readers(out)
            else:
                yield op

    def _escapes(self, value: Value) -> bool:
        """Whether ``value`` (or a view of it) is a program output."""
        if id(value) in self.outputs:
            return True
        views = [op for op in self.readers.get(id(value), []) if fusion_kind(op) == "free"]
        return any(self._escapes(out) for op in views for out in op.outputs)

    def _form_groups(self) -> None:
        """Consumers first, as XLA's fusion pass: a loop op joins the groups of all its readers when
        each of them takes producers, unless it is a program output or read by several groups that
        would not each compute it again (``_duplicable``): then it is a kernel of its own."""
        group_of: dict[int, list[Group]] = {}
        for op in reversed(self.live):
            if self._is_free(op):
                continue
            targets = {id(g): g for v in op.outputs for r in self._kernel_readers(v) for g in group_of[id(r)]}
            fusible = (
                fusion_kind(op) == "loop"
                and targets
                and all(g.takes_producers for g in targets.values())
                and not any(self._escapes(v) for v in op.outputs)
                and (len(targets) == 1 or self._duplicable(op, targets.values()))
            )
            if fusible:
                for g in targets.values():
                    g.members.append(op)
                group_of[id(op)] = list(targets.values())
                continue
            group = Group(op)
            self.groups.append(group)
            group_of[id(op)] = [group]
        self.groups.reverse()

    def source(self, value: Value) -> tuple[int, float]:
        """What reading ``value`` reads: the value it views (through reshapes, broadcasts and slices)
        and the fewest bytes along the way (a broadcast reads its operand; a constant ``full``, none)."""
        nbytes = float(value.type.nbytes)
        op = self.producer.get(id(value))
        while op is not None and self._is_free(op) and id(op) not in self.folded:
            if not op.inputs:  # full
                return id(value), 0.0
            value = op.inputs[0]
            nbytes = min(nbytes, float(value.type.nbytes))
            op = self.producer.get(id(value))
        return id(value), nbytes

    def group_phases(self, group: Group, own: list[Kernel]) -> list[Kernel]:
        """The phases of ``group``: the root's own (``own``) with its members fused into the first,
        their arithmetic added and the root's reads of values made inside the group replaced by the
        reads of what enters it."""
        if not group.takes_producers:
            return own
        made = {id(v) for op in group.members for v in op.outputs}
        read: dict[int, float] = {}  # what the root reads, by source value
        saved = 0.0  # bytes the root's own phases count that it does not read
        for v in group.root.inputs:
            key, nbytes = self.source(v)
            if key in made:
                saved += v.type.nbytes
            else:
                saved += v.type.nbytes - nbytes
                read[key] = nbytes
        flops = 0.0
        entering: dict[int, float] = {}
        for op in group.members:
            flops += sum(k.flops for k in _phases(op))
            for v in op.inputs:
                key, nbytes = self.source(v)
                if key not in made and key not in read:
                    entering[key] = nbytes
        first = own[0]
        fused = first._replace(flops=first.flops + flops, bytes=first.bytes - saved + sum(entering.values()))
        return [fused, *own[1:]]

    def program_phases(self) -> Iterator[Kernel]:
        """Every phase the program runs, group by group."""
        for group in self.groups:
            yield from self.group_phases(group, _phases(group.root, self.device))
            if not self.epilogues:
                r = group.root
                yield from epilogue(r.name, [v.type for v in r.inputs], r.outputs[0].type)


def epilogue(op: str, inputs: Sequence[TensorType], output: TensorType) -> list[Kernel]:
    """The loop a dot or conv with a fused epilogue (``linear``, ``conv2d_bias_act``: operands beyond
    the two it contracts, the bias) runs as where the backend does not fuse it: read the product and
    the bias, write the result."""
    if op == OPAQUE or not OPS[op].contraction or len(inputs) <= 2:
        return []
    bias = sum(t.nbytes for t in inputs[2:])
    return [Kernel(2.0 * output.size, 2.0 * output.nbytes + bias)]


class XlaFusion(CostModel):
    """Roofline seconds of the kernels XLA runs (``Fused``): a program's cost sums its fusion groups.
    It times no kernel (``timed_ops`` is empty on every backend): a call timed alone is not the fusion
    group it runs in. Over this device's profile where that was not measured (the built-in GPU and TPU
    ones: ``Device.measured``), its error is unknown, so every program it changes is timed whole
    against the input (``eqsat.speed.compared``).

    The extractors add up op costs, so for them a loop op costs the write of its result only (no
    reads, no launch: fused, it shares its group's); the candidates they return, and the input, are
    then compared by ``program_cost`` over the groups themselves.
    """

    error = 0.31

    def __init__(self, device: str | Device | None = None) -> None:
        """``device``: as ``Roofline``'s, the roofline alone whichever it is. A dot's or conv's bias
        and activation are its epilogue on a GPU or TPU profile (``Device.platform``), a loop of their
        own after it on a CPU one."""
        self.roofline = Roofline(profile(device))
        self.device = self.roofline.device
        self.error = error_over(self.error, self.device, device is None)
        self.name = f"xla:{self.device.name}"
        self.epilogues = self.device.platform != "cpu"

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        if op == OPAQUE or OPS[op].fusion_kind != "loop":
            after = [] if self.epilogues else epilogue(op, inputs, output)
            own = self.roofline.op_cost(op, attrs, inputs, output)
            return own + sum(map(self.roofline.phase_seconds, after))
        flops = sum(k.flops for k in phases(op, attrs, inputs, output))
        d = self.device
        bandwidth = d.cache_bandwidth if output.nbytes <= d.cache_bytes else d.bandwidth
        return max(flops / d.peak(), output.nbytes / bandwidth)

    def program_cost(self, program: Program) -> float:
        fused = Fused(program, self.epilogues, self.device)
        return sum(map(self.roofline.phase_seconds, fused.program_phases()))

    def fingerprint(self) -> str | None:
        return f"xla {self.device!r}"
