"""Spark Connect round trips of one phase of the benchmark, by kind and by deltaport call site.

Every call the client makes to the server is a gRPC round trip: ExecutePlan (a query, a
command, a write, a commit), AnalyzePlan (a schema, a plan's semantics) and Config. On a warm
engine a round trip costs milliseconds to a second whatever the data, so their number per
delta is the platform's fixed cost per delta, the thing issue 8 counts. How: inside the
`with`, the client class's RPC methods are wrapped (the same object the platform's
sessions use; nothing changes for them) and each call is timed until its result is consumed,
and filed under the innermost frame of deltaport's own code (resources/, platform_assets/)
that made it. Outside the `with` the client is as it was.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1]) + "/"
_OWN = ("resources/", "platform_assets/")
# client method -> kind of round trip
_METHODS = {"_execute_and_fetch_as_iterator": "execute", "_execute": "execute", "_analyze": "analyze",
            "config": "config"}


@dataclass
class RoundTrips:
    # "kind file:line function" -> [calls, seconds waited]; everything else is derived from it
    sites: dict = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))
    # (start, end, thread, site) of every call, perf_counter seconds: which calls overlapped
    timeline: list = field(default_factory=list)

    @property
    def calls(self) -> Counter:
        """kind -> calls"""
        out: Counter = Counter()
        for site, (n, _) in self.sites.items():
            out[site.split(" ", 1)[0]] += n
        return out

    @property
    def total(self) -> int:
        return sum(n for n, _ in self.sites.values())

    def timeline_text(self) -> list[str]:
        """The calls in start order: start and end (s after the first call), thread, site."""
        if not self.timeline:
            return []
        origin = min(t0 for t0, *_ in self.timeline)
        return [f"{t0 - origin:7.3f} {t1 - origin:7.3f} {thread[-12:]:>12} {site}"
                for t0, t1, thread, site in sorted(self.timeline)]

    def to_dict(self, top: int = 12) -> dict:
        busiest = sorted(self.sites.items(), key=lambda kv: -kv[1][1])[:top]
        return {"round_trips": self.total, "by_kind": dict(self.calls),
                "seconds_waited": round(sum(t for _, t in self.sites.values()), 2),
                "top_sites": [{"site": s, "calls": n, "seconds": round(t, 3)} for s, (n, t) in busiest]}


def _site() -> str:
    """deltaport's innermost frame on the stack (this module is in bench/, not counted)."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename
        if path.startswith(ROOT) and path[len(ROOT):].startswith(_OWN):
            return f"{path[len(ROOT):]}:{frame.lineno} {frame.name}"
    return "(outside deltaport)"


@contextmanager
def counting_round_trips():
    """Counts the Spark Connect round trips of every session in this process while inside."""
    from pyspark.sql.connect.client import core

    out = RoundTrips()
    lock = threading.Lock()
    cls = core.SparkConnectClient
    originals = {name: getattr(cls, name) for name in _METHODS}

    @contextmanager
    def timed(kind: str):
        site, t0 = f"{kind} {_site()}", time.perf_counter()
        try:
            yield
        finally:
            with lock:
                out.timeline.append((t0, time.perf_counter(), threading.current_thread().name, site))
                entry = out.sites[site]
                entry[0] += 1
                entry[1] += time.perf_counter() - t0

    def wrap(name: str, kind: str):
        orig = originals[name]
        if name == "_execute_and_fetch_as_iterator":  # a generator: timed until exhausted
            def call(self, *args, **kwargs):
                with timed(kind):
                    yield from orig(self, *args, **kwargs)
        else:
            def call(self, *args, **kwargs):
                with timed(kind):
                    return orig(self, *args, **kwargs)
        return call

    try:
        for name, kind in _METHODS.items():
            setattr(cls, name, wrap(name, kind))
        yield out
    finally:
        for name, orig in originals.items():
            setattr(cls, name, orig)
