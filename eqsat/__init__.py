"""eqsat: optimize tensor programs by equality saturation (egglog), run them with JAX."""

from eqsat.api import OptimizeResult, optimize
from eqsat.config import config
from eqsat.cost import CostModel, Flops, NodeCount, Roofline
from eqsat.cost.calibrate import calibrate
from eqsat.errors import (
    EqsatError,
    MiscompileError,
    ParseError,
    ShapeError,
    UnsoundRuleError,
    UnsupportedError,
)
from eqsat.frontend.builder import Builder
from eqsat.frontend.jax import from_jax
from eqsat.frontend.pir import load, parse_pir
from eqsat.host_memory import keep_host_memory
from eqsat.ir import Op, Program, TensorType, Value, parse_program
from eqsat.jit import jit
from eqsat.prove import Equivalence, equivalent
from eqsat.report import Report
from eqsat.rules.traced import Built
from eqsat.saturate import Limits, Stop, StopReason
from eqsat.user_rules import rule
from eqsat.version import __version__ as __version__

__all__ = [
    "Builder",
    "Built",
    "CostModel",
    "EqsatError",
    "Equivalence",
    "Flops",
    "Limits",
    "MiscompileError",
    "NodeCount",
    "Op",
    "OptimizeResult",
    "ParseError",
    "Program",
    "Report",
    "Roofline",
    "ShapeError",
    "Stop",
    "StopReason",
    "TensorType",
    "UnsoundRuleError",
    "UnsupportedError",
    "Value",
    "calibrate",
    "config",
    "equivalent",
    "from_jax",
    "jit",
    "keep_host_memory",
    "load",
    "optimize",
    "parse_pir",
    "parse_program",
    "rule",
]
