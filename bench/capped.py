"""A child process run under a memory cap, its peak RSS measured exactly: what the number
cases of the fault suite (bench/fault_numbers.py, bench/fault_stream_numbers.py) run their
readers with, so that a reader which trusts a number fails with MemoryError instead of taking
the host down.

What flows through: an argv goes in; its exit code, peak RSS (MiB, from wait4), seconds and
output come out. A child that hangs past the timeout is killed and reported, never waited on.
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["CAP_MIB", "LIMIT_MIB", "Capped", "run_capped"]

CAP_MIB = 2048  # RLIMIT_AS of each child: virtual memory, so well above the RSS it may use
LIMIT_MIB = 500  # peak RSS each child must stay under


@dataclass
class Capped:
    """A child process run under the cap: exit code, peak RSS (MiB), seconds, output."""

    returncode: int
    peak_mib: float
    seconds: float
    stdout: str
    stderr: str


def run_capped(argv: list[str], *, cap_mib: int = CAP_MIB, timeout: float = 300.0) -> Capped:
    """Run `argv` with this checkout first on PYTHONPATH and RLIMIT_AS set to `cap_mib`."""
    cap = cap_mib * 1024 * 1024
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    began = time.monotonic()
    proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT, env=env,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    timer = threading.Timer(timeout, proc.kill)  # a hang is a finding too: end it, report it
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak RSS, not any other's
    except BaseException:  # interrupted (a test's timeout, ^C): leave no child behind
        proc.kill()
        raise
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - began
    with out, err:
        out.seek(0)
        err.seek(0)
        return Capped(proc.returncode, round(usage.ru_maxrss / 1024, 1), round(seconds, 2),
                      out.read().decode(errors="replace"), err.read().decode(errors="replace"))
