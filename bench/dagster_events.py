"""Dagster events a phase of a benchmark wrote to the instance's event log, and the seconds their
writes took: the part of a delta's fixed cost that is Dagster's own bookkeeping.

What flows through: a `DagsterInstance`; inside the `with`, each event handed to its
`handle_new_event` (step and run events, materializations, check results, log lines, the
sensor's runless lag events) is counted by type and its write timed, on whichever thread wrote
it. Outside the `with` the instance is as it was.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class EventWrites:
    by_type: dict = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))  # type -> [events, seconds]

    @property
    def total(self) -> int:
        return sum(n for n, _ in self.by_type.values())

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.by_type.values())

    def to_dict(self) -> dict:
        return {"events": self.total, "write_seconds": round(self.seconds, 3),
                "by_type": {k: {"events": n, "seconds": round(s, 3)}
                            for k, (n, s) in sorted(self.by_type.items(), key=lambda kv: -kv[1][1])}}


@contextmanager
def counting_events(instance):
    """Counts and times the events written to `instance` while inside."""
    out, lock = EventWrites(), threading.Lock()
    original = instance.handle_new_event

    def handle(event, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(event, *args, **kwargs)
        finally:
            kind = event.dagster_event_type.value if event.dagster_event_type else "LOG_MESSAGE"
            with lock:
                entry = out.by_type[kind]
                entry[0] += 1
                entry[1] += time.perf_counter() - t0

    instance.handle_new_event = handle
    try:
        yield out
    finally:
        del instance.handle_new_event  # the class's method again
