"""``eqsat.jit``: like ``jax.jit``, with equality saturation between tracing and compiling.

On the first call for each signature (pytree structure, shapes and dtypes of the array arguments,
values of the static ones) the function is traced and optimized, and the optimized program lowered
and compiled; later calls with the same signature hit jax.jit's cache. A first call does not wait for
the optimization (``eqsat.config.background``): the function runs as written, as under ``jax.jit``,
while a background thread optimizes it, and the calls after it finished run the optimized program.
Where the program cache holds the optimization, where the call is traced inside another
transformation (``jax.grad``, an enclosing ``jit``), and for ``lower``, ``trace``, ``eval_shape`` and
``result``, the optimized program is waited for.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import inspect
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax

from eqsat.api import OptimizeResult, cached_result, optimize_with
from eqsat.cache import ProgramCache
from eqsat.config import config
from eqsat.cost import CostModel
from eqsat.errors import UnsupportedError
from eqsat.frontend.jax import jaxpr_of, to_program
from eqsat.gradient import GRADIENT_MODES, differentiable
from eqsat.ir import Program
from eqsat.lowering import lower
from eqsat.options import Options
from eqsat.rules import Rule, resolve
from eqsat.saturate import Limits, prepare
from eqsat.speed import io_bytes, too_large


def _hide_eqsat_frames() -> None:
    """Let jax's traceback filtering hide eqsat's frames, as it hides its own: an error in the user's
    function reads as under jax.jit (JAX's private hook; without it, tracebacks are only longer)."""
    with contextlib.suppress(ImportError, AttributeError):
        from jax._src import traceback_util

        import eqsat.lowering
        import eqsat.rules

        for package in (eqsat.lowering, eqsat.rules, sys.modules["eqsat"]):
            traceback_util.register_exclusion(str(Path(package.__file__ or "").parent))


_hide_eqsat_frames()


class _Caller(threading.local):
    """The arguments of the ``Jitted.__call__`` running in this thread, for the trace it starts."""

    args: tuple[tuple[Any, ...], dict[str, Any]] | None = None


_CALLER = _Caller()
_RUNNING: set[threading.Thread] = set()  # background optimizations, waited for as the process ends


def _finish_background() -> None:
    """Wait for the background optimizations as the interpreter shuts down, before
    ``concurrent.futures`` refuses new work (kernel timing compiles in a pool), so their results
    reach the program cache."""
    while _RUNNING:
        _RUNNING.pop().join()


# threading's own exit hooks run before non-daemon threads are joined, in the reverse order of
# registration: registered after concurrent.futures' (eqsat.cost imports it), this one runs first
getattr(threading, "_register_atexit", atexit.register)(_finish_background)


class Jitted:
    """The callable ``eqsat.jit`` returns: a ``jax.jit`` whose tracing step optimizes.

    jax.jit traces once per signature (pytree structure, shapes, dtypes, weak types, static values);
    eqsat hooks into that trace: it traces the function to a Program, optimizes it, and emits the
    optimized program instead. Later calls of the signature run through jax.jit's own cache, with no
    eqsat overhead. ``optimizations`` counts signatures optimized; ``results`` maps each to its
    ``OptimizeResult``.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        rules: Iterable[Rule | str] | None,
        cost: str | CostModel | Callable[..., float],
        limits: Limits | None,
        verify: bool,
        measure: bool = False,
        gradient: str = "measure",
        static_argnums: Sequence[int] = (),
        static_argnames: Sequence[str] = (),
        jit_options: dict[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        chosen = resolve(rules)  # an unknown rule name fails here, at decoration
        if gradient not in GRADIENT_MODES:
            raise ValueError(f"unknown gradient mode {gradient!r} ({', '.join(GRADIENT_MODES)})")
        self.gradient = gradient
        self._hint = _hint(fn)
        # where the first call waits for its optimization, the rules start installing now, in the
        # background (decorators run early), unless an earlier process left optimized programs of this
        # function: then its first call is likely a cache hit, which needs no rules, and installing
        # them would only compete with it (as they would with a first call that runs as written)
        self._likely_hit = config.enable_cache and ProgramCache().hint(self._hint).exists()
        if not self._likely_hit and not config.background:
            prepare(chosen)
        xla_options = (jit_options or {}).get("compiler_options")
        self.options = Options.of(chosen, cost, limits, verify, measure=measure, compiler_options=xla_options)
        self.static_argnums, self.static_argnames = _static_args(fn, static_argnums, static_argnames)
        self.results: dict[Any, OptimizeResult] = {}
        self._warned: set[str] = set()
        self._pending: dict[Any, threading.Thread] = {}  # signatures optimizing in the background
        self._unstarted: list[threading.Thread] = []  # started once the call that traced them returns
        self._finished = False  # one has finished since the last call: trace it again to run it
        self._traces: dict[Any, Any] = {}  # what pending signatures traced, for their next trace

        @functools.wraps(fn)  # jax.jit reads fn's signature through __wrapped__ (static args by keyword)
        def optimized_trace(*args: Any, **kwargs: Any) -> Any:
            with _collection_paused():
                return self._optimized_trace(args, kwargs)

        # inlined into an enclosing jit's program, as the function itself would be: a nested jit is
        # split in two where it is differentiated, its residuals chosen apart from the rest of the
        # program (on XLA:CPU, a bfloat16 attention's training step ran 1.15x slower so)
        self._jit_options: dict[str, Any] = {
            "static_argnums": self.static_argnums,
            "static_argnames": self.static_argnames,
            **{"inline": True, **(jit_options or {})},
        }
        self._hook = optimized_trace
        self._jitted = jax.jit(optimized_trace, **self._jit_options)
        # signatures whose program eqsat chose compiler options for (OptimizeResult.compiler_options), and
        # the jax.jit compiling under each such set
        self._routes: dict[Any, tuple[tuple[str, Any], ...]] = {}
        self._under: dict[tuple[tuple[str, Any], ...], Any] = {}
        functools.update_wrapper(self, fn)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).lower``: the optimized program lowered to StableHLO (``.as_text()``,
        ``.compile()``); optimizes the signature if it is new."""
        return self._settled()._jitted_for(args, kwargs).lower(*args, **kwargs)

    def trace(self, *args: Any, **kwargs: Any) -> Any:
        """``jax.jit(...).trace``: the optimized program's jaxpr (``.jaxpr``), ready to ``.lower()``."""
        return self._settled()._jitted_for(args, kwargs).trace(*args, **kwargs)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """The output shapes and dtypes (``jax.ShapeDtypeStruct``), as ``jax.jit(...).eval_shape``."""
        return self._settled()._jitted_for(args, kwargs).eval_shape(*args, **kwargs)

    def wait(self) -> None:
        """Wait for the optimizations running in the background (``eqsat.config.background``)."""
        self._start()
        for thread in list(self._pending.values()):
            thread.join()

    def _start(self) -> None:
        """Start the background optimizations traced so far (after the call that traced them has
        compiled the function as written: they would compete with it)."""
        while self._unstarted:
            thread = self._unstarted.pop(0)
            _RUNNING.add(thread)
            thread.start()

    def _settled(self) -> Jitted:
        """Self, once no optimization runs in the background and jax.jit's traces of the function as
        written are gone."""
        self.wait()
        self._swap_in()
        return self

    def _swap_in(self) -> None:
        """Where an optimization finished in the background, forget jax.jit's traces of the function as
        written: the next call traces again and runs the optimized program."""
        if self._finished:
            self._finished = False
            self._jitted.clear_cache()  # type: ignore[attr-defined]  # (JAX has it; its stub does not)

    @property
    def optimizations(self) -> int:
        return len(self.results)

    def __repr__(self) -> str:
        pending = f", {len(self._pending)} optimizing" if self._pending else ""
        return f"<eqsat.jit of {self.fn!r}: {len(self.results)} signatures optimized{pending}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._swap_in()
        outer, _CALLER.args = _CALLER.args, (args, kwargs)
        try:  # as cheap a call as jax.jit's: arguments are checked only when jax.jit refuses them
            return self._jitted_for(args, kwargs)(*args, **kwargs)
        except Exception as e:
            if isinstance(e, TypeError):
                self._check_arguments(args, kwargs)
            if e.__traceback__ is not None:  # without this frame, the error reads as jax.jit's
                e.with_traceback(e.__traceback__.tb_next)
            raise
        finally:
            _CALLER.args = outer
            if self._unstarted:
                self._start()

    def _jitted_for(self, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """The jax.jit these arguments run through: where eqsat chose compiler options for their
        signature's program, one compiling under them, unless the call is traced into another program
        (an enclosing jit's, a derivative's), which compiles under its own; else the function's own."""
        if not self._routes:  # no signature chose any: a call costs what jax.jit's does
            return self._jitted
        chosen = self._routes.get(self._signature(args, kwargs))
        if chosen is None:
            return self._jitted
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves((args, kwargs))):
            return self._jitted
        jitted = self._under.get(chosen)
        if jitted is None:
            options = {**self._jit_options, "compiler_options": dict(chosen)}
            jitted = self._under[chosen] = jax.jit(self._hook, **options)
        return jitted

    def _kept(self, key: Any, result: OptimizeResult) -> None:
        """``result`` as the signature ``key``'s; routed to the compiler options eqsat chose for it."""
        self.results[key] = result
        if result.report.compiler_options:
            self._routes[key] = result.report.compiler_options

    def _warn_once(self, message: str) -> None:
        """A warning, once per message, placed where the function is defined (the call is inside
        jax's trace)."""
        if message in self._warned:
            return
        self._warned.add(message)
        code = getattr(self.fn, "__code__", None)
        where = (code.co_filename, code.co_firstlineno) if code is not None else ("eqsat.jit", 0)
        warnings.warn_explicit(message, RuntimeWarning, *where)

    def _check_arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """An ``UnsupportedError`` naming the first dynamic argument that is not an array."""
        dynamic, _, dyn_kwargs, _ = self._split(args, kwargs)
        for leaf in jax.tree_util.tree_leaves((dynamic, dyn_kwargs)):
            if not hasattr(leaf, "dtype") and not isinstance(leaf, int | float | bool):
                raise UnsupportedError(
                    f"eqsat.jit arguments must be arrays (or pytrees of arrays), got a "
                    f"{type(leaf).__name__}; mark other arguments static with static_argnums"
                )

    def _split(
        self, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[int, Any], dict[str, Any], dict[str, Any]]:
        """(dynamic positional args, static ones by index, dynamic keyword args, static ones)."""
        static = {i: args[i] for i in self.static_argnums if i < len(args)}
        static_kw = {k: v for k, v in kwargs.items() if k in self.static_argnames}
        dynamic = [a for i, a in enumerate(args) if i not in static]
        return dynamic, static, {k: v for k, v in kwargs.items() if k not in static_kw}, static_kw

    def _signature(self, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The key of ``results``: the dynamic arguments' structure, shapes and dtypes, the static
        arguments' values."""
        dynamic, static, dyn_kwargs, static_kw = self._split(args, kwargs)
        specs = jax.tree_util.tree_map(_spec, (dynamic, dyn_kwargs))
        return (
            jax.tree_util.tree_structure(specs),
            tuple(jax.tree_util.tree_leaves(specs)),
            tuple(static.items()),
            tuple(sorted(static_kw.items())),
        )

    def result(self, *args: Any, **kwargs: Any) -> OptimizeResult:
        """The ``OptimizeResult`` of the signature of these arguments (optimized now if new):
        ``f.result(x).report``, ``f.result(x).show()``."""
        key = self._signature(args, kwargs)
        if key in self._pending:
            self.wait()
        if key not in self.results:
            self._settled()._jitted.trace(*args, **kwargs)
        return self.results[key]

    def clear_cache(self) -> None:
        """Forget every signature (jax.jit's compiled programs and the optimization results): the next
        call traces and optimizes again (the program cache on disk may still hold its result)."""
        self._jitted.clear_cache()  # type: ignore[attr-defined]  # (JAX has it; its stub does not)
        self.results.clear()
        self._routes.clear()
        self._under.clear()

    def _optimized_trace(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Runs while jax.jit traces a new signature: trace to a Program, optimize, emit it (or, while
        it optimizes in the background, the function as written)."""
        caller, _CALLER.args = _CALLER.args, None  # a call inside the function is a call of its own
        dynamic, static, dyn_kwargs, static_kw = self._split(args, kwargs)
        specs = jax.tree_util.tree_map(_spec, (dynamic, dyn_kwargs))

        def with_static(*dyn: Any, **kw: Any) -> Any:
            it = iter(dyn)
            full = [static[i] if i in static else next(it) for i in range(len(args))]
            return self.fn(*full, **kw, **static_kw)

        provisional = self._provisional(caller)
        if not self._likely_hit and not provisional:
            prepare(self.options.rules)  # unless installed or on their way: install while we trace
        key = self._signature(args, kwargs)
        leaves = jax.tree_util.tree_leaves((dynamic, dyn_kwargs))
        # the only call of the function: a trace that ran it as written while it was optimized in the
        # background kept what it traced
        traced_once = self._traces.pop(key, None)
        if traced_once is None:
            traced_once = jaxpr_of(with_static, *specs[0], **specs[1])
        try:
            traced = to_program(traced_once)
        except UnsupportedError as e:  # a value eqsat does not model (complex): run it as written
            self._warn_once(f"eqsat.jit: {getattr(self.fn, '__name__', 'the function')} runs as written: {e}")
            return jax.tree_util.tree_unflatten(traced_once.out_tree, traced_once.run(*leaves))
        if key in self._pending and not provisional:
            self.wait()
        if key not in self.results and key not in self._pending:
            # a first call runs as written while it optimizes, unless an earlier process likely left
            # the optimized program in the cache (a hit is as quick as the call as written)
            hit = cached_result(traced.program, self.options) if provisional and self._likely_hit else None
            if hit is not None:
                self._kept(key, hit)
            elif provisional and (why := _too_large_to_run_as_written(traced.program)):
                self._optimized(key, traced.program)
                report = self.results[key].report
                waited = f"the first call waited for the optimization: {why}"
                report.note = "; ".join(filter(None, [report.note, waited]))
            elif provisional:
                self._optimize_in_background(key, traced.program)
            else:
                self._optimized(key, traced.program)
        result = self.results.get(key)
        if result is None:  # optimizing in the background: the function as written meanwhile
            self._traces[key] = traced_once
            return jax.tree_util.tree_unflatten(traced_once.out_tree, traced_once.run(*leaves))

        def written(*flat: Any) -> tuple[Any, ...]:  # the function as written: its jaxpr, not a new call
            return tuple(traced_once.run(*flat))

        # a function closing over an enclosing trace's values is differentiated as the traced program,
        # which takes them as arguments (and inlines the derivatives the function defines)
        if traced.closed_over:
            emitted = differentiable(result, self.gradient, lower(result.original))
        else:
            emitted = differentiable(result, self.gradient, written, traced.own_derivatives)
        outs = emitted(*leaves, *traced.closed_over)
        return jax.tree_util.tree_unflatten(traced.out_tree, outs)

    def _provisional(self, caller: tuple[tuple[Any, ...], dict[str, Any]] | None) -> bool:
        """Whether a trace started by ``caller``'s call may run the function as written while it
        is optimized: background optimization is on, no check was asked for (``verify``: its error is
        raised at the call), and the call is not inside another trace (whose program would keep the
        function as written)."""
        if not config.background or self.options.verify or caller is None:
            return False
        return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(caller))

    def _optimized(self, key: Any, program: Any) -> None:
        """Optimize ``program``, the signature ``key``'s, now; its result in ``results``."""
        result = optimize_with(program, self.options)
        self._kept(key, result)
        if result.report.cache in ("stored", "hit") and not self._likely_hit:
            ProgramCache().mark(self._hint)
        if result.report.cut_short:
            name = getattr(self.fn, "__name__", "the function")
            self._warn_once(
                f"eqsat.jit: the optimization of {name} was cut short, and is not cached: "
                f"{result.report.cut_short}. The best program found runs; larger eqsat.Limits search further"
            )

    def _optimize_in_background(self, key: Any, program: Any) -> None:
        """Optimize ``program`` in a thread of its own; the next call after it finished runs it. The
        thread is not a daemon: a process that ends first waits for it, so the result is cached."""

        def work() -> None:
            try:
                self._optimized(key, program)
            except BaseException as e:  # egglog's panics too: the function as written keeps running
                name = getattr(self.fn, "__name__", "the function")
                self._warn_once(f"eqsat.jit: optimizing {name} failed ({e!r}): it runs as written")
            else:
                self._finished = True
            finally:
                self._pending.pop(key, None)
                _RUNNING.discard(threading.current_thread())

        thread = threading.Thread(target=work, name="eqsat-optimize")
        self._pending[key] = thread
        self._unstarted.append(thread)


def _too_large_to_run_as_written(program: Program) -> str | None:
    """Why a first call does not run ``program`` as written while it is optimized: a value it computes
    takes far more memory than its arguments and results (``eqsat.speed.too_large``), as attention's
    S x S scores do where the optimized program never holds them (S = 32768: 32 GiB)."""
    values = [v for op in program.live_ops() for v in op.outputs]
    if not values:
        return None
    largest = max(values, key=lambda v: v.type.nbytes)
    return too_large(
        largest.type.nbytes, io_bytes(program), f"a {largest.type} the function as written holds"
    )


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a signature is traced, optimized and lowered: the
    objects they allocate set off full collections of a process's heap mid-trace (60 ms of a cache hit
    on a 12-layer BERT); what they leave is collected once the collector is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _hint(fn: Callable[..., Any]) -> str:
    """What names ``fn`` across processes: its module, qualified name and where its code starts."""
    code = getattr(fn, "__code__", None)
    where = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__name__)} {where}"


def _spec(a: Any) -> jax.ShapeDtypeStruct:
    """Shape, dtype and weak type of an argument: ``x_f16 * 2.0`` stays float16, as under jax.jit."""
    aval = jax.typeof(a)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _static_args(
    fn: Callable[..., Any], nums: Sequence[int], names: Sequence[str]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Static arguments by position and by name, each completed from the other through fn's
    signature (as jax.jit does); negative positions count from the last positional parameter."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return tuple(nums), tuple(names)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    has_varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    resolved = []
    for i in nums:
        if i < -len(positional) or (i >= len(positional) and not has_varargs):
            raise UnsupportedError(
                f"static_argnums {i} is out of range for {getattr(fn, '__name__', fn)} "
                f"({len(positional)} positional parameters)"
            )
        resolved.append(i % len(positional) if i < 0 else i)
    by_name = [positional.index(n) for n in names if n in positional]
    all_nums = tuple(sorted(set(resolved) | set(by_name)))
    all_names = tuple(dict.fromkeys([*names, *(positional[i] for i in all_nums if i < len(positional))]))
    return all_nums, all_names


def jit(
    fn: Callable[..., Any] | None = None,
    *,
    rules: Iterable[Rule | str] | None = None,
    cost: str | CostModel | Callable[..., float] = "roofline",
    limits: Limits | None = None,
    verify: bool = False,
    measure: bool = False,
    gradient: str = "measure",
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = True,
    compiler_options: dict[str, Any] | None = None,
) -> Any:
    """Decorator: ``@eqsat.jit`` or ``@eqsat.jit(verify=True, static_argnums=(1,))``.

    Static arguments are given by position (negative counts from the end) or by name, and may be
    passed either way, as with ``jax.jit``. ``donate_argnums``/``donate_argnames``,
    ``in_shardings``/``out_shardings`` (a sharded program runs over several devices: XLA partitions
    the optimized program as it would the original), ``keep_unused``, ``device``, ``backend`` and
    ``compiler_options`` mean what they mean to ``jax.jit`` (eqsat times and checks what it chooses under
    the ``compiler_options`` too, as ``eqsat.optimize`` does; given none, a signature may run under
    options eqsat measured it faster with, ``f.result(x).compiler_options``); ``inline`` too, but it is
    on by default:
    the optimized program is inlined into an enclosing jit's, as the function itself would be traced
    there (a nested jit is split in two where it is differentiated). ``measure``: as in
    ``eqsat.optimize``, where the predicted gain is within the cost model's error, both programs
    are timed on this device at the first call of a signature and the faster is run. ``gradient``:
    what is differentiated where the function is (``jax.grad``, ``jax.vjp``, ``jax.jvp``):
    ``measure`` (default) whichever of the function as
    written and the optimized program runs a training step faster, both timed at the first
    differentiation of a signature; ``optimized``; ``input``, the function as written (see
    ``eqsat.gradient``). Decorating starts installing the rule set in a background thread (once
    per rule set and process), so the first call finds it ready; an unknown rule name fails here.
    """
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    given = {
        "donate_argnums": donate_argnums,
        "donate_argnames": donate_argnames,
        "in_shardings": in_shardings,
        "out_shardings": out_shardings,
        "compiler_options": compiler_options,
        "device": device,
        "backend": backend,
    }
    options = {k: v for k, v in given.items() if v is not None} | {
        "keep_unused": keep_unused,
        "inline": inline,
    }

    def wrap(f: Callable[..., Any]) -> Jitted:
        return Jitted(
            f,
            rules=rules,
            cost=cost,
            limits=limits,
            verify=verify,
            measure=measure,
            gradient=gradient,
            static_argnums=nums,
            static_argnames=names,
            jit_options=options,
        )

    return wrap(fn) if fn is not None else wrap
