"""Peak memory of one phase of the benchmark: this Python process, the Spark Connect server's
JVM (bench/engine.py gives its pid), and the JVM's Python workers (the executor read path's),
without psutil.

How: at the start of a phase every watched process's peak-RSS mark is reset (writing "5" to
/proc/<pid>/clear_refs, Linux >= 4.0); at the end, this process's peak is
`resource.getrusage(RUSAGE_SELF).ru_maxrss` (the reset applies to it too) and the others'
is VmHWM in /proc/<pid>/status. Processes that ended during the phase are not counted. Where
/proc or clear_refs is not available, peaks are since process start (`reset` says which).
"""

from __future__ import annotations

import os
import resource
from dataclasses import asdict, dataclass
from pathlib import Path


def _status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset(pid: int | str) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """Every live descendant of `pid` (scan of /proc/*/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(parents.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(parents.get(child, []))
    return out


@dataclass
class Peak:
    python_mib: float
    jvm_mib: float | None = None
    workers_mib: float | None = None
    reset: bool = True

    @property
    def total_mib(self) -> float:
        return self.python_mib + (self.jvm_mib or 0) + (self.workers_mib or 0)

    def to_dict(self) -> dict:
        return {**asdict(self), "total_mib": round(self.total_mib, 1)}


class PeakMemory:
    """`with PeakMemory(jvm) as m: ...` then `m.peak`. `jvm`: the driver JVM's pid or None."""

    def __init__(self, jvm: int | None = None):
        self.jvm = jvm
        self.peak: Peak | None = None

    def __enter__(self) -> PeakMemory:
        self._reset = _reset("self")
        if self.jvm is not None:
            for pid in [self.jvm, *_children(self.jvm)]:
                self._reset &= _reset(pid)
        return self

    def __exit__(self, *exc: object) -> None:
        py = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        jvm = workers = None
        if self.jvm is not None:
            hwm = _status_kib(self.jvm, "VmHWM")
            jvm = hwm / 1024 if hwm is not None else None
            kids = [_status_kib(p, "VmHWM") for p in _children(self.jvm)]
            workers = sum(k for k in kids if k) / 1024
        self.peak = Peak(round(py, 1), None if jvm is None else round(jvm, 1),
                         None if workers is None else round(workers, 1), self._reset)


def max_peak(peaks: list[Peak]) -> Peak | None:
    """The phase with the highest total (peaks of different processes are not summed across
    phases: each phase's total is of one moment range)."""
    return max(peaks, key=lambda p: p.total_mib, default=None)


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
