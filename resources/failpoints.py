"""Named points where the fault suite kills this process (issue 11: "a crash at any point leaves
either the old state or the new one, never half").

What flows through: the environment variable ``DELTAPORT_FAILPOINTS``, read when a point is
passed (never at import), holds comma-separated specs:

* ``name``       SIGKILL this process the first time `name` is passed;
* ``name@K``     ... the K-th time (e.g. the second table of a delta);
* ``name~MS``    arm a timer at the first pass and SIGKILL MS milliseconds later, whatever the
                 process is doing then (inside a MERGE that the Spark server is running);
* ``name=pause`` SIGSTOP this process instead, so the fault suite can break something else at
                 that exact point (restart the broker, kill the Spark server), then SIGCONT it.

Counts are per process. With ``DELTAPORT_FAILPOINTS_ONCE`` set to a file path, a point fires in
one process only, the first to create that file (a daemon's run that is retried in a new process
must not die again at the same point).

What this module guarantees: with the variable unset (every deployment), `failpoint()` costs a
dictionary lookup and does nothing. SIGKILL, not an exception: no ``finally``, no atexit hook,
no flush runs, as when the kernel's OOM killer or a lost node ends a run worker.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

__all__ = ["ENV", "ONCE_ENV", "POINTS", "failpoint"]

ENV = "DELTAPORT_FAILPOINTS"
ONCE_ENV = "DELTAPORT_FAILPOINTS_ONCE"

# Every point the code passes, for the fault suite and for a mistyped name to be caught.
POINTS = {
    "ingest.read": "after a message of a Prostore topic was read by the sensor's ingest, before it is indexed",
    "increment.table_committed": "after one increment table's commit; the run's other increment tables go "
                                 "side by side, so they may be before, inside or after their write",
    "increment.before_manifest": "after every increment table of the run, before the manifest row",
    "increment.write": "before an increment table's write (its rows are read from Kafka then)",
    "history.written": "after a snapshot table's history commit (the versions its delta or range closes), "
                       "before its MERGE",
    "step.phase1_reported": "after a datamart step reported its signal events, changelog and increment (their "
                            "events written by Dagster), while its snapshot works",
    "snapshot.merge": "when a snapshot MERGE is sent to Spark (use ~MS to die while it runs)",
    "snapshot.committed": "after a snapshot table's MERGE commit, before its delta_<N> tag",
    "snapshot.table_done": "after a snapshot table reached a delta (commit and tag); the delta's other "
                           "tables go side by side, so they may be before, inside or after their MERGE",
    "snapshot.delta_done": "after every table reached a delta of a range, before the next delta",
    "spark.keeper_spawned": "after a starter spawned the embedded Spark server's keeper, before it recorded it and "
                            "handed it the launch",
    "spark.server_launched": "after the embedded Spark server's JVM was launched by a starter (`deltaport sync`, "
                             "`deltaport spark start`, a run), before the server answers",
    "lake.landed_mark": "after every snapshot commit of a run, before the lake's own landed mark moves (the "
                        "manifest's deltaport.landed-through: resources/lake/landed_mark.py)",
    "cdc.applied": "after a change-stream snapshot table reached the run's delta (one commit for a range); "
                   "the run's other tables go side by side",
    "maintenance.compact": "when a snapshot table's compaction is sent to Spark (use ~MS to die while it runs)",
    "maintenance.compact_history": "when a history table's compaction is sent to Spark (use ~MS to die while it "
                                   "runs)",
    "maintenance.table_done": "after one table's maintenance (compaction, expiry), before the next table's",
    "retire.partitions_deleted": "after a retirement pass deleted its old partitions from Dagster, before it "
                                 "deletes their runs (platform_assets/retirement.py)",
    "retire.run_deleted": "after a retirement pass deleted one old run, before the next one",
    "retire.runs_deleted": "after a retirement pass deleted its old partitions and runs, before it moves the "
                           "source's retired_through mark",
}

_passes: Counter = Counter()
_passes_lock = threading.Lock()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _first_to_fire() -> bool:
    once = os.environ.get(ONCE_ENV)
    if not once:
        return True
    try:
        fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())  # who fired: the suite may need to break it further
    os.close(fd)
    return True


def failpoint(name: str) -> None:
    """Pass the point `name`: die here when the fault suite asked for it."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    if name not in POINTS:
        raise ValueError(f"unknown failpoint {name!r}; known: {sorted(POINTS)}")
    with _passes_lock:  # tables applied side by side pass points from several threads
        _passes[name] += 1
        passes = _passes[name]
    for item in spec.split(","):
        item, action = item.strip().partition("=")[::2]
        point, delay = item.partition("~")[::2]
        point, nth = point.partition("@")[::2]
        if point != name or passes != (int(nth) if nth else 1) or not _first_to_fire():
            continue
        if action == "pause":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif delay:
            timer = threading.Timer(int(delay) / 1000, _die)
            timer.daemon = True
            timer.start()
        else:
            _die()
