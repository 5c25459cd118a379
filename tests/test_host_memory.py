"""eqsat.keep_host_memory: an XLA call's large buffers reused from call to call, not faulted in afresh;
and host_memory.give_back_freed: transient memory returned to the system unless it is kept.

Each case runs in a process of its own: the setting is the whole process's."""

from __future__ import annotations

import subprocess
import sys

import pytest

import eqsat
from eqsat import host_memory

_CALLS = """
import resource, sys, warnings
warnings.simplefilter("error")
import jax, jax.numpy as jnp
import eqsat

if sys.argv[1] == "late":
    jax.numpy.ones(3).block_until_ready()
kept = eqsat.keep_host_memory() if sys.argv[1] != "returned" else False
f = jax.jit(lambda x: x * 2.0)
x = jnp.ones(24 * 2**20 // 4, jnp.float32)  # 24 MiB in, 24 MiB out
f(x).block_until_ready()
faults = []
for _ in range(12):  # JAX frees a call's buffers after the next has begun: the heap grows a while
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    y = f(jnp.concatenate([x, x, x, x]))  # 96 MiB: past the 64 MiB a thread's arena can hold
    y.block_until_ready()
    del y
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, min(faults))
"""


_FREED = """
import sys
import numpy as np
from eqsat import host_memory

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

kept = host_memory.keep_host_memory() if sys.argv[1] == "kept" else False
first = np.ones(2**22, np.float32)  # 16 MiB, mapped afresh; freed, it raises glibc's mapping threshold
del first
blocks = [np.ones(2**22, np.float32) for _ in range(9)]  # now in the heap
del blocks[:-1]  # the last stays: the heap's top is not trimmed on its own
before = rss_mib()
gave = host_memory.give_back_freed()
print(kept, gave, before - rss_mib())
"""


def _run(mode: str, script: str = _CALLS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.skipif(host_memory._glibc() is None, reason="glibc's malloc only")
def test_kept_memory_is_not_faulted_in_again():
    """96 MiB of buffers a call (the concatenation and the product): returned to the system, every
    call faults in thousands of pages; kept, once the heap has grown to hold them (a few calls), a
    call faults in next to none."""
    returned, kept = _run("returned"), _run("kept")
    assert returned.returncode == 0 and kept.returncode == 0, returned.stderr + kept.stderr
    assert returned.stdout.split()[0] == "False" and kept.stdout.split()[0] == "True"
    returned_faults, kept_faults = int(returned.stdout.split()[1]), int(kept.stdout.split()[1])
    assert returned_faults > 10_000, returned_faults  # 2 x 96 MiB of 4 KiB pages is 49,152
    assert kept_faults < 1_000, kept_faults


@pytest.mark.skipif(host_memory._glibc() is None, reason="glibc's malloc only")
def test_a_call_after_jax_ran_says_it_comes_late():
    late = _run("late")
    assert late.returncode != 0 and "RuntimeWarning" in late.stderr, late.stderr
    assert "after JAX started its backend" in late.stderr


@pytest.mark.skipif(host_memory._glibc() is None, reason="glibc's malloc only")
def test_freed_memory_is_given_back_unless_kept():
    """Eight freed 16 MiB blocks below a live one: glibc holds them until given back, 128 MiB of the
    resident set; where keep_host_memory() was applied, nothing is given back."""
    returned, kept = _run("returned", _FREED), _run("kept", _FREED)
    assert returned.returncode == 0 and kept.returncode == 0, returned.stderr + kept.stderr
    assert returned.stdout.split()[:2] == ["False", "True"] and float(returned.stdout.split()[2]) > 100
    assert kept.stdout.split()[:2] == ["True", "False"] and float(kept.stdout.split()[2]) < 16


def test_without_glibc_nothing_changes(monkeypatch):
    monkeypatch.setattr(host_memory, "_glibc", lambda: None)
    assert eqsat.keep_host_memory() is False
    assert host_memory.give_back_freed() is False
