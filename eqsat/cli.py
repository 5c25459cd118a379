"""The ``eqsat`` command line: optimize, prove, show, rules, ops, cache, calibrate, demo."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from eqsat.errors import EqsatError
from eqsat.examples import PIR as EXAMPLES
from eqsat.progress import ProgressBar
from eqsat.version import __version__

if TYPE_CHECKING:
    from eqsat.ir import Program


def _version() -> str:
    """eqsat's version, and those of the parts its results depend on."""
    from importlib.metadata import PackageNotFoundError, version

    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return f"{__version__} (egglog {of('egglog')}, jax {of('jax')}, jaxlib {of('jaxlib')})"


def _limits(args: argparse.Namespace):
    from eqsat.saturate import Limits

    given = {
        "max_iterations": args.max_iterations,
        "max_nodes": args.max_nodes,
        "timeout_s": args.timeout,
        "kernel_seconds": args.kernel_seconds,
    }
    return Limits(**{name: value for name, value in given.items() if value is not None})


def _optimize(args: argparse.Namespace) -> int:
    """Optimize a file and print it before and after. A dynamic batch left unbound is optimized at 1
    (a note says so); other dynamic dims (an image's, a sequence's size) must be bound: no size is
    invented for them."""
    import eqsat
    from eqsat.errors import ShapeError
    from eqsat.text import DYNAMIC

    bound = dict(args.shape or [])
    program = eqsat.load(args.file, params=args.params, shapes=bound)
    for name, declared in program.dynamic.items():
        if name in bound:
            continue
        if DYNAMIC in declared[1:]:  # an image's or a sequence's size: what the program computes changes
            example = ",".join(f"D{i}" if d == DYNAMIC else str(d) for i, d in enumerate(declared))
            raise ShapeError(
                f"input {name!r} is declared {list(declared)}: its sizes are the caller's to give "
                f"(--shape {name}={example})"
            )
        (value,) = [v for v in program.inputs if v.name == name]
        print(
            f"note: input {name!r} is declared {list(declared)}: optimized at {list(value.type.shape)} "
            f"(bind its dynamic batch with --shape {name}=...)"
        )
    rules = args.rules.split(",") if args.rules else None
    progress = ProgressBar(delay=0.0, verbose=args.verbose)
    try:
        result = eqsat.optimize(
            program,
            rules=rules,
            cost=args.cost,
            limits=_limits(args),
            progress=progress,
            verify=args.verify,
            extractor=args.extractor,
            cache=False if args.no_cache else None,
            measure=args.measure,
        )
    except eqsat.MiscompileError as e:  # --verify found a difference: exit 1, as its help says
        print(f"eqsat: verify failed: {e}", file=sys.stderr)
        return 1
    finally:
        progress.close()
    if not args.quiet:
        print("== before\n" + str(program))
        print("== after\n" + str(result.program))
    print("== report\n" + str(result.report))
    if args.output:
        Path(args.output).write_text(str(result.program) + "\n")
        print(f"wrote {args.output}")
    from eqsat.lowering import check_runnable

    check_runnable(result.program)  # an op without a meaning: an error (exit 2), not a silent success
    if args.verify:
        print("verify: the optimized program runs and agrees with the original on random inputs")
    return 0


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D0,D1,...`` -> (NAME, dims)."""
    name, _, dims = text.partition("=")
    try:
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        shape = ()
    if not name or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"expected NAME=D0,D1,... with sizes >= 0, got {text!r}")
    return name, shape


def _prove(args: argparse.Namespace) -> int:
    import eqsat

    a, b = eqsat.load(args.first), eqsat.load(args.second)
    rules = args.rules.split(",") if args.rules else None
    result = eqsat.equivalent(a, b, rules=rules, limits=_limits(args))
    print(result)
    return 0 if result else 1


def _show(args: argparse.Namespace) -> int:
    import eqsat

    program = eqsat.load(args.file)
    print(program)
    print("ops: " + ", ".join(f"{k} x{v}" for k, v in program.op_counts().items()))
    if args.svg:
        from eqsat.show import Picture, program_graph

        Picture(program_graph(program, Path(args.file).name)).save(args.svg)
        print(f"wrote {args.svg}")
    if args.egraph_svg:
        result = eqsat.optimize(program, cache=False)  # a cached result keeps no e-graph to draw
        caps = {"max_classes": args.max_classes} if args.max_classes else {}
        result.show("egraph", depth=args.depth, **caps).save(args.egraph_svg)
        print(f"wrote {args.egraph_svg} (the saturated e-graph)")
    return 0


def _rules(args: argparse.Namespace) -> int:
    from eqsat.rules import RULESETS

    print("(* inexact in IEEE arithmetic: guarded; left out by --rules exact)")
    print("(- off by default in optimize; --rules all or the name turns it on; prove uses every rule)")
    for theme, rules in RULESETS.items():
        print(f"{theme}:")
        for r in rules:
            mark = ("" if r.exact else " *") + ("" if r.default else " -")
            print(f"  {r.name + mark:28} {r.reason}")
    return 0


def _ops(args: argparse.Namespace) -> int:
    from eqsat.ops import OPS, VARIADIC

    for op in OPS.values():
        arity = "a list of" if op.arity == VARIADIC else op.arity
        operands = f"{arity} operand{'' if op.arity == 1 else 's'}"
        attrs = ", ".join(a.name if a.default is None else f"{a.name}={a.default}" for a in op.attrs)
        reached = [*(f"jax {p}" for p in op.jax), *(f"paddle {p}" for p in op.paddle)]
        reached += [f"spelled: {s.source}" for s in op.spellings]
        print(f"{op.name}: {operands}" + (f"; {attrs}" if attrs else ""))
        for line in textwrap.wrap(op.doc, 96):
            print(f"    {line}")
        if reached:
            print(f"    [{', '.join(reached)}]")
    return 0


def _demo(args: argparse.Namespace) -> int:
    import jax

    import eqsat
    from eqsat.lowering import lower

    # The DRR fixture casts f32 -> f64 -> f32; running the original without jax_enable_x64 truncates
    # the f64 step (harmlessly: the round trip is lossless) and JAX warns about it.
    warnings.filterwarnings("ignore", message="Explicitly requested dtype float64")
    directory = Path(args.dir)
    if not directory.is_dir():
        raise EqsatError(f"--dir {directory}: no such folder")
    files = sorted(directory.glob("*_before.pir"))
    if not files:
        raise EqsatError(f"--dir {directory}: no *_before.pir files in it")
    for path in files:
        program = eqsat.load(path)
        result = eqsat.optimize(program, verify=True)
        before = jax.jit(lower(program))()
        after = result.fn()
        diff = max(
            float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(before, after, strict=True)
        )
        print(f"== {path.name}")
        print(f"ops before: {program.op_counts()}")
        print(f"ops after:  {result.program.op_counts()}")
        print(result.report)
        print(f"JAX outputs before/after agree: max abs diff {diff:.3g}\n")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from eqsat.cache import ProgramCache

    store = ProgramCache()
    if args.action == "clear":
        print(f"removed {store.clear()} entries from {store.directory}")
        return 0
    info = store.info()
    print(f"directory: {info['directory']}")
    print(f"enabled:   {'yes' if info['enabled'] else 'no (EQSAT_ENABLE_CACHE)'}")
    print(f"entries:   {info['entries']}")
    print(f"size:      {_human(info['bytes'])} of at most {_human(info['max_bytes'])}")
    return 0


def _human(n: float) -> str:
    """A size in bytes, KiB, MiB or GiB."""
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _calibrate(args: argparse.Namespace) -> int:
    import json

    from eqsat.cost.calibrate import calibrate

    if args.kernels or args.common:
        return _time_kernels_of(_programs_to_time(args), args.kernel_seconds)
    device = calibrate(
        quick=args.quick, save=not args.no_save, progress=lambda step: print(step, file=sys.stderr)
    )
    print(json.dumps(device.to_json(), indent=2))
    return 0


def _programs_to_time(args: argparse.Namespace) -> Iterator[tuple[str, Program]]:
    """The files of ``--kernels``, then with ``--common`` the common CNNs' conv layers."""
    import eqsat
    from eqsat.common_convs import common_programs

    for path in args.kernels or ():
        yield path, eqsat.load(path)
    if args.common:
        yield from common_programs(args.size, args.batch)


def _time_kernels_of(programs: Iterable[tuple[str, Program]], seconds: float) -> int:
    """Time every alternative kernel of these programs this device has not timed: a later
    optimization of them reads the timings instead of spending its own time limit on them: the
    optimizer's stages up to ``kernels``, nothing extracted."""
    from eqsat.options import Options
    from eqsat.pipeline import Job, State, run, span
    from eqsat.saturate import Limits

    for name, program in programs:
        limits = Limits(timeout_s=seconds + 60.0, kernel_seconds=seconds)
        state = run(State.of(program, Job.of(Options.of(limits=limits))), span("repeats", "kernels"))
        print(f"{name}: {state.kernels_timed} kernels timed in {state.timings.get('kernels', 0.0):.1f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eqsat", description="Optimize tensor programs by equality saturation."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    opt = sub.add_parser(
        "optimize", help="optimize a program (PIR dump, saved Paddle model, eqsat text); print before/after"
    )
    opt.add_argument("file", help="a PIR text dump (.pir), a saved Paddle program (.json) or eqsat text")
    opt.add_argument("--params", help="the weights: Paddle's .pdiparams saved with the model, or an .npz")
    opt.add_argument(
        "--rules", help="comma-separated themes, rule names, exact or all (default: the rules on by default)"
    )
    opt.add_argument(
        "--cost",
        default="roofline",
        help="cost model: nodes, flops, roofline (this JAX backend) or roofline:DEVICE "
        "with DEVICE in cpu, h100, tpu-v5e, calibrated; xla or xla:DEVICE: the roofline over the kernels "
        "XLA fuses (default: roofline)",
    )
    _limit_options(opt)
    opt.add_argument(
        "--shape",
        type=_shape,
        action="append",
        metavar="NAME=D0,D1,...",
        help="bind an input's dynamic (-1) dims (repeatable); a dynamic batch left unbound is optimized at "
        "1 (a note says so), any other dynamic dim must be bound (exit 2 naming the input)",
    )
    opt.add_argument(
        "--verify",
        "--check",
        action="store_true",
        help="run the original and the optimized program on random inputs of several kinds and check they "
        "agree (exit 1 where they do not)",
    )
    opt.add_argument(
        "--extractor",
        default="auto",
        choices=("auto", "greedy", "ilp", "egglog"),
        help="auto: exact ILP up to 5000 e-nodes, else greedy; egglog: its own tree extraction, "
        "for reference (default: auto)",
    )
    opt.add_argument(
        "--measure",
        action="store_true",
        help="where the predicted gain is within the cost model's measured error, time the input and the "
        "optimized program on this device and keep the faster",
    )
    opt.add_argument(
        "--no-cache", action="store_true", help="neither reuse nor store the result (see `eqsat cache`)"
    )
    opt.add_argument("-o", "--output", help="write the optimized program (eqsat text) to this file")
    opt.add_argument("-q", "--quiet", action="store_true", help="print the report only")
    opt.add_argument("-v", "--verbose", action="store_true", help="print each saturation iteration")
    opt.set_defaults(func=_optimize)

    prove = sub.add_parser(
        "prove",
        help="prove two programs equal by saturation and explain how (exit 0: proven, 1: not proven)",
    )
    prove.add_argument("first", help="a .pir dump or eqsat text file")
    prove.add_argument("second", help="another, with the same inputs")
    prove.add_argument("--rules", help="comma-separated themes or rule names (default: every rule)")
    _limit_options(prove)
    prove.set_defaults(func=_prove)

    show = sub.add_parser("show", help="print a program in eqsat's text form; draw it or its e-graph")
    show.add_argument("file", help="a PIR text dump (.pir), a saved Paddle program (.json) or eqsat text")
    show.add_argument("--svg", help="draw the program (graphviz) into this SVG file")
    show.add_argument("--egraph-svg", help="saturate it and draw the e-graph into this SVG file")
    show.add_argument(
        "--depth", type=int, help="e-graph picture: only classes this many reads from the outputs"
    )
    show.add_argument("--max-classes", type=int, help="e-graph picture: at most this many e-classes (150)")
    show.set_defaults(func=_show)

    rules = sub.add_parser("rules", help="list the rewrite rules by theme")
    rules.set_defaults(func=_rules)

    ops = sub.add_parser("ops", help="list the canonical ops: operands, attributes, meaning, spellings")
    ops.set_defaults(func=_ops)

    cache = sub.add_parser(
        "cache",
        help="the cache of optimized programs: info or clear",
        description="Optimized programs are kept in $EQSAT_CACHE_DIR/programs (default ~/.cache/eqsat), "
        "keyed by the program, rules, cost model, limits and versions; EQSAT_ENABLE_CACHE=0 turns it off.",
    )
    cache.add_argument(
        "action", choices=("info", "clear"), help="info: where, entries, size; clear: remove them"
    )
    cache.set_defaults(func=_cache)

    calibrate = sub.add_parser(
        "calibrate",
        help="measure this device's kernels and write the roofline profile eqsat uses from then on",
        description="Times dot and conv peaks per dtype and layout, bandwidth in and out of cache, the cost "
        "of a kernel and of a device-loop step (under a minute), prints the profile and writes it to "
        "$EQSAT_CACHE_DIR (plain JSON: read it, edit it, delete it to use the built-in profile).",
    )
    calibrate.add_argument("--quick", action="store_true", help="smaller kernels: seconds, rougher")
    calibrate.add_argument("--no-save", action="store_true", help="print the profile only")
    calibrate.add_argument(
        "--kernels",
        nargs="+",
        metavar="FILE",
        help="instead: time the alternative kernels of these programs not yet timed on this device "
        "(the convs' formulations), so that optimizing them later reads the timings",
    )
    calibrate.add_argument(
        "--common",
        action="store_true",
        help="instead (or as well): time the formulations of every conv layer of ResNet-18, ResNet-50 and "
        "MobileNetV2 at --size and --batch, in both layouts (minutes; each is timed once per device)",
    )
    calibrate.add_argument(
        "--size", type=int, default=224, help="with --common: the input's height and width (default: 224)"
    )
    calibrate.add_argument("--batch", type=int, default=1, help="with --common: the batch (default: 1)")
    calibrate.add_argument(
        "--kernel-seconds",
        type=float,
        default=600.0,
        help="with --kernels or --common: at most this long per program (default: 600)",
    )
    calibrate.set_defaults(func=_calibrate)

    demo = sub.add_parser("demo", help="optimize the bundled PIR programs and check them in JAX")
    demo.add_argument("--dir", default=str(EXAMPLES), help="folder of *_before.pir files")
    demo.set_defaults(func=_demo)
    return parser


def _limit_options(parser: argparse.ArgumentParser) -> None:
    """The limits' options; each left out takes ``eqsat.Limits``'s default."""
    parser.add_argument("--max-iterations", type=int, help="saturation iterations (default: Limits', 30)")
    parser.add_argument("--max-nodes", type=int, help="e-node limit (default: Limits', 20000)")
    parser.add_argument(
        "--timeout",
        type=float,
        help="safety net on the whole optimization's time in s: work, not time, bounds the search, and "
        "a result it cuts short is not cached (default: Limits', 60)",
    )
    parser.add_argument(
        "--kernel-seconds",
        type=float,
        help="safety net on the time spent timing this device's kernels not yet timed (default: "
        "$EQSAT_KERNEL_SECONDS or 600; 0: none are timed)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader went away (``eqsat rules | head``): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush does not fail
        return 128 + signal.SIGPIPE
    except (EqsatError, OSError) as e:
        print(f"eqsat: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
