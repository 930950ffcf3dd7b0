"""CPU seconds the Spark Connect server spent on one phase of the benchmark, without psutil.

Wall time on a small machine hides whether a phase waited or worked: two commits side by side
take less wall time than in turn, but no less CPU. This counts the work: user + system time of
the server's JVM and its Python workers (live descendants, plus the children it has reaped),
from /proc/<pid>/stat, before and after the phase. None where /proc is not there or the server
is not ours (a remote engine).
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.peak_memory import _children

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _ticks(pid: int, *, reaped: bool) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # fields[11:15] = utime, stime, cutime, cstime (stat fields 14-17)
    return sum(int(f) for f in fields[11:15 if reaped else 13])


def server_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds so far of `pid` and every live descendant (and the ones it reaped)."""
    if pid is None:
        return None
    try:
        total = _ticks(pid, reaped=True)
    except (OSError, ValueError, IndexError):
        return None
    for child in _children(pid):
        try:
            total += _ticks(child, reaped=False)
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile: its time is in the parent's reaped children
    return total / _TICKS
