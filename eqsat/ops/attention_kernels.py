"""``flash_attention`` on the kernels JAX ships for each backend, chosen at lowering time.

On a GPU: cuDNN's fused attention (``jax.nn.dot_product_attention(implementation="cudnn")``), then
Pallas' Triton attention (``pallas.ops.gpu.attention.mha``, with its own backward pass; half precision
only: Triton multiplies float32 operands as TF32). On a TPU:
Pallas' flash attention (``pallas.ops.tpu.flash_attention``, forward and backward). Elsewhere, and for
any call a kernel does not compute exactly as the program does, eqsat's own lowering
(``eqsat.ops.attention.flash_attention``): ``route`` names the kernel or every kernel's reason for
refusing, so there is no silent gap.

What "exactly" means: each kernel computes q kᵀ, the scale, the bias and the softmax in float32, rounds
the probabilities to v's dtype and accumulates their product with v in float32, as a program whose
``scores_dtype`` and ``softmax_dtype`` are float32 does; a program that rounds elsewhere keeps eqsat's
lowering. The kernels mask causally (key j <= query i) and fill with -0.7·float32 max; a program's
fill maps onto that when it is -inf or at most ``FILL_BOUND`` (the masked keys' exponentials are 0 in
both unless every kept score of a row lies below fill + 104). Boolean masks go to no kernel: the GPU
and TPU kernels take only causal and segment masks, and cuDNN's handling of a fully masked row is not
the program's. Like eqsat's own flash lowering, the kernels fold ``scale / divisor`` into one factor
and rescale the softmax online: float32 roundings, not the program's dtypes, differ.

``interpret(backend)`` lowers as on ``backend`` with the Pallas kernels in interpret mode on this
machine, and cuDNN's call through ``jax.nn.dot_product_attention``'s XLA implementation (the same
arguments): the tests check every kernel path without a device."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from math import prod
from types import ModuleType
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from .attention_call import AttentionCall

Array = jax.Array
FILL_BOUND = -1e9
"""A finite fill at most this maps onto the kernels' own masking value (see the module's doc)."""
_INTERPRETED: ContextVar[str | None] = ContextVar("eqsat_interpreted_backend", default=None)


class Operand(Protocol):
    """What ``Call.of`` reads of an operand: an array's, or a ``TensorType``'s (a cost model's)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> Any: ...


@dataclass(frozen=True)
class Call:
    """What a kernel needs to know of one ``flash_attention`` call: its attributes, its operands'
    shapes, q's dtype, its bias's dtype (None: no bias) and whether it has a boolean mask (neither
    known to be a no-op)."""

    attention: AttentionCall
    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    dtype: str
    bias: str | None
    masked: bool

    @classmethod
    def of(
        cls,
        attention: AttentionCall,
        q: Operand,
        k: Operand,
        v: Operand,
        bias: Operand | None,
        mask: Operand | None,
    ) -> Call:
        """The call of ``attention`` on these operands (``bias`` and ``mask`` None where they do nothing)."""
        bias_dtype = None if bias is None else str(bias.dtype)
        return cls(attention, q.shape, k.shape, v.shape, str(q.dtype), bias_dtype, mask is not None)

    @property
    def heads(self) -> int:
        """The q rows' batch: every batch dim of q, together."""
        return prod(self.q[:-2])


@dataclass(frozen=True)
class Route:
    """Where a call goes: ``kernel`` (a name of ``KERNELS``, or ``"xla"`` for eqsat's lowering) and
    why it does not go to each kernel tried before it."""

    kernel: str
    refused: tuple[tuple[str, str], ...] = ()

    @property
    def reason(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in self.refused)


def _common(call: Call, dtypes: Sequence[str]) -> str | None:
    """What every kernel asks: see the module's doc."""
    a = call.attention
    if call.dtype not in dtypes:
        return f"q of dtype {call.dtype} (takes {', '.join(dtypes)})"
    if (a.scores_dtype, a.softmax_dtype) != ("float32", "float32"):
        return f"scores in {a.scores_dtype}, softmax in {a.softmax_dtype} (the kernel's are float32)"
    if a.product_dtype != "float32":
        return f"q kᵀ rounded to {a.product_dtype} (the kernel keeps it float32)"
    if not a.shifted:
        return "an unshifted softmax (the kernel subtracts the running max)"
    if a.softcap:
        return f"scores soft-capped at {a.softcap:g} (the kernel caps none)"
    if call.masked:
        return "a boolean mask (the kernel masks only causally)"
    if a.causal and not (a.fill == -math.inf or a.fill <= FILL_BOUND):
        return f"a causal fill of {a.fill} (maps only -inf or at most {FILL_BOUND:g})"
    if call.v[-1] != call.q[-1]:
        return f"v's head dim {call.v[-1]} differs from q's {call.q[-1]}"
    return None


def _block(length: int, sizes: Sequence[int]) -> int | None:
    """The largest of ``sizes`` that divides ``length``."""
    return next((s for s in sizes if length % s == 0), None)


def _gpu_attention() -> ModuleType:
    """``pallas.ops.gpu.attention`` (which warns that it moved to tokamax, not a dependency here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from jax.experimental.pallas.ops.gpu import attention
    return attention


def _gpu_blocks(call: Call) -> Any:
    """Pallas GPU attention's block sizes for this call, or why there are none: blocks of 16 to 128
    that tile both lengths, backward blocks that split them into as many blocks."""
    sq, sk = call.q[-2], call.k[-2]
    bq, bk = _block(sq, (128, 64, 32, 16)), _block(sk, (128, 64, 32, 16))
    back_k = _block(sk, (32, 16))
    if bq is None or bk is None or back_k is None:
        return f"lengths {sq} and {sk} (blocks of 16 to 128 must tile them)"
    back_q, rest = divmod(sq, sk // back_k)
    if rest or back_q < 16 or back_q & (back_q - 1):
        return f"lengths {sq} and {sk} (the backward pass splits them into as many blocks)"
    return _gpu_attention().BlockSizes(bq, bk, back_q, back_k, back_q, back_k)


def _refuse_cudnn(call: Call) -> str | None:
    refused = _common(call, ("float16", "bfloat16"))
    if refused:
        return refused
    if call.q[-1] > 128 or call.q[-1] % 8:
        return f"head dim {call.q[-1]} (takes a multiple of 8 up to 128)"
    if call.bias is not None and call.bias != call.dtype:
        return f"a bias of dtype {call.bias} (takes q's dtype)"
    if call.bias is not None and (call.q[-2] % 2 or call.k[-2] % 2):
        return "a bias with an odd length (its backward pass takes even ones)"
    return None


def _refuse_pallas_gpu(call: Call) -> str | None:
    # float32: Triton multiplies float32 operands as TF32 (on an H100, max abs error 4.2e-4 against
    # the program's 1e-7 at (1, 4, 256, 64): bench/device.json's gpu tests), a precision no program
    # asked for
    refused = _common(call, ("float16", "bfloat16"))
    if refused:
        return refused
    if call.bias is not None:
        return "a bias (the kernel takes none)"
    blocks = _gpu_blocks(call)
    return blocks if isinstance(blocks, str) else None


def _tpu_scale(call: Call) -> bool:
    """Whether q may carry the scale (the TPU kernel adds the bias before it scales): always without
    a bias; with one, where scaling q rounds as eqsat's own flash lowering does (float32), or not at
    all (a power of two)."""
    scale = call.attention.factor
    return call.bias is None or scale == 1 or call.dtype == "float32" or abs(math.frexp(scale)[0]) == 0.5


def _refuse_pallas_tpu(call: Call) -> str | None:
    refused = _common(call, ("bfloat16", "float32"))
    if refused:
        return refused
    if call.q[-2] % 128 or call.k[-2] % 128:
        return f"lengths {call.q[-2]} and {call.k[-2]} (takes multiples of 128)"
    if call.q[-1] > 128 and call.q[-1] % 128:
        return f"head dim {call.q[-1]} (takes up to 128, or a multiple of 128)"
    if not _tpu_scale(call):
        scale = call.attention.factor
        return f"a bias with a {call.dtype} q and scale {scale} (the kernel scales after the bias)"
    return None


RunFn = Callable[[Call, Array, Array, Array, "Array | None", bool], Array]


def _heads(call: Call, x: Array) -> Array:
    """``x`` (q, k or v) as (1, q's batch, length, dim): k's and v's batch broadcast to q's."""
    x = jnp.broadcast_to(x, (*call.q[:-2], *x.shape[-2:]))
    return x.reshape(1, call.heads, *x.shape[-2:])


def _scores_bias(call: Call, bias: Array) -> Array:
    """The bias broadcast to the scores, as (1, q's batch, Sq, Sk)."""
    return jnp.broadcast_to(bias, (*call.q[:-1], call.k[-2])).reshape(1, call.heads, call.q[-2], call.k[-2])


def _cudnn(call: Call, q: Array, k: Array, v: Array, bias: Array | None, interpreted: bool) -> Array:
    """(B, N, S, D) -> cuDNN's (B, S, N, D); k and v keep one head for all when they have one (cuDNN's
    MQA). Other ranks run as (1, q's batch, S, D)."""
    if q.ndim != 4:
        full = None if bias is None else _scores_bias(call, bias)
        heads = [_heads(call, t) for t in (q, k, v)]
        out = _cudnn(call, heads[0], heads[1], heads[2], full, interpreted)
        return out.reshape(call.q)
    shared = all(t.shape[:2] == (q.shape[0], 1) for t in (k, v))  # one kv head for all: cuDNN's MQA
    k, v = (t if shared else jnp.broadcast_to(t, (*q.shape[:2], *t.shape[2:])) for t in (k, v))
    full = None if bias is None else jnp.broadcast_to(bias, (*q.shape[:-1], k.shape[-2]))
    query, key, value = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))
    out = jax.nn.dot_product_attention(
        query,
        key,
        value,
        bias=full,
        scale=call.attention.factor,
        is_causal=call.attention.causal,
        implementation="xla" if interpreted else "cudnn",
    )
    return jnp.swapaxes(out, 1, 2)


def _pallas_gpu(call: Call, q: Array, k: Array, v: Array, bias: Array | None, interpreted: bool) -> Array:
    """Triton attention over (1, S, q's batch, D)."""
    mha = _gpu_attention().mha
    blocks = _gpu_blocks(call)
    q, k, v = (jnp.swapaxes(_heads(call, t), 1, 2) for t in (q, k, v))
    scale, causal = call.attention.factor, call.attention.causal
    out = mha(q, k, v, None, sm_scale=scale, causal=causal, block_sizes=blocks, interpret=interpreted)
    return jnp.swapaxes(out, 1, 2).reshape(call.q)


def _pallas_tpu(call: Call, q: Array, k: Array, v: Array, bias: Array | None, interpreted: bool) -> Array:
    """Pallas' TPU flash attention over (1, q's batch, S, D); with a bias, q carries the scale."""
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes, flash_attention

    sq, sk = call.q[-2], call.k[-2]
    bq, bk = _block(sq, (512, 256, 128)), _block(sk, (512, 256, 128))
    assert bq is not None and bk is not None  # the route checked the lengths
    blocks = BlockSizes(bq, bk, bk, 1, bq, bk, bk, bq, bk, bk, bq)
    q, k, v = (_heads(call, t) for t in (q, k, v))
    scale = call.attention.factor
    if bias is not None and scale != 1:
        q, scale = q * jnp.asarray(scale, q.dtype), 1.0
    ab = None if bias is None else _scores_bias(call, bias)
    out = flash_attention(q, k, v, ab, causal=call.attention.causal, sm_scale=scale, block_sizes=blocks)
    return out.reshape(call.q)


@dataclass(frozen=True)
class AttentionKernel:
    """A kernel of one backend: why it refuses a call (None: it takes it), and how it runs one."""

    name: str
    refuse: Callable[[Call], str | None]
    run: RunFn


KERNELS: dict[str, tuple[AttentionKernel, ...]] = {
    "gpu": (
        AttentionKernel("cudnn", _refuse_cudnn, _cudnn),
        AttentionKernel("pallas-gpu", _refuse_pallas_gpu, _pallas_gpu),
    ),
    "tpu": (AttentionKernel("pallas-tpu", _refuse_pallas_tpu, _pallas_tpu),),
}
"""The kernels of each backend, in the order they are tried; a backend not here has none."""


def backend() -> str:
    """The backend attention is lowered for: the interpreted one, else the default device's
    (``jax.default_device``), else JAX's default backend."""
    device = jax.config.jax_default_device
    platform = device if isinstance(device, str) or device is None else device.platform
    return _INTERPRETED.get() or platform or jax.default_backend()


def _taker(call: Call, on: str) -> tuple[AttentionKernel | None, tuple[tuple[str, str], ...]]:
    """The first kernel of backend ``on`` that takes ``call`` (None: none does), and the reasons of
    those tried before it."""
    refused: list[tuple[str, str]] = []
    for kernel in KERNELS.get(on, ()):
        why = kernel.refuse(call)
        if why is None:
            return kernel, tuple(refused)
        refused.append((kernel.name, why))
    return None, tuple(refused)


def route(call: Call, on: str | None = None) -> Route:
    """The first kernel of backend ``on`` (default: ``backend()``) that takes ``call``, else eqsat's
    lowering (``"xla"``) with each kernel's reason."""
    on = on or backend()
    kernel, refused = _taker(call, on)
    if kernel is not None:
        return Route(kernel.name, refused)
    return Route("xla", refused or (("xla", f"no attention kernel on {on}"),))


def run(call: Call, q: Array, k: Array, v: Array, bias: Array | None) -> Array | None:
    """``call`` on its backend's kernel, or None where it goes to eqsat's lowering (or cuDNN, on a
    device, rejects what its documented limits allow)."""
    kernel, _ = _taker(call, backend())
    if kernel is None:
        return None
    interpreted = _INTERPRETED.get() is not None
    try:
        return kernel.run(call, q, k, v, bias, interpreted).astype(q.dtype)
    except (NotImplementedError, RuntimeError, ValueError):
        if interpreted:  # a mapping this module got wrong: the tests must see it
            raise
        return None


@contextmanager
def interpret(on: str) -> Iterator[None]:
    """Lower attention as on backend ``on`` ("gpu", "tpu"), running its kernels on this machine:
    Pallas' in interpret mode, cuDNN's call through XLA's implementation. Wrap tracing and running
    both (a TPU kernel is lowered when its computation is compiled)."""
    if on not in KERNELS:
        raise ValueError(f"no attention kernels to interpret on {on!r} (known: {', '.join(KERNELS)})")
    token = _INTERPRETED.set(on)
    try:
        if on == "tpu":
            from jax.experimental.pallas import tpu as pltpu

            with pltpu.force_tpu_interpret_mode():
                yield
        else:
            yield
    finally:
        _INTERPRETED.reset(token)
