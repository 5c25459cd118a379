#!/usr/bin/env bash
# The device check (bench/device.py) on a machine with a GPU or TPU: the device-only tests and a short
# benchmark, written to bench/device.json, in under 5 minutes. Needs JAX for the device installed in
# the environment (pip install -e '.[dev,gpu]' on a CUDA machine); PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
"$PYTHON" -c 'import jax; print("devices:", jax.devices())'
exec timeout 300 "$PYTHON" -m bench.device "$@"
