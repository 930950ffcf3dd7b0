"""Cores kept busy beside a measurement: the "busy machine" users run the CLI on (issue 56).

`busy_cores(n)` starts `n` Python processes that spin on the CPU (no I/O, no memory to speak of)
and stops them when the block ends. Each also stops itself after `bound_seconds`, so a bench
that dies without its `finally` (SIGKILL) leaves no burner spinning for long.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

# Spins until its deadline; the deadline is its own, so it needs nobody to stop it.
_SPIN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def busy_cores(n: int, *, bound_seconds: float = 900.0) -> Iterator[list[int]]:
    """`n` CPU-bound processes running for the block (their pids); none when `n` is 0."""
    burners = [subprocess.Popen([sys.executable, "-c", _SPIN, str(bound_seconds)]) for _ in range(n)]
    try:
        if burners:
            time.sleep(0.5)  # past their own interpreter start: spinning when the first measurement starts
        yield [p.pid for p in burners]
    finally:
        for p in burners:
            p.terminate()
        for p in burners:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
