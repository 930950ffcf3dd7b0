"""Keeping the lag's reports bounded: the newest of them, not one or two per delta for ever.

Why: the sensor reports a source's lag when what it says changes (platform_assets/lag.py): an
observation on `<source>/snapshot` and an evaluation of `lag_within_bound`, each a runless event
(no run holds them). A delta changes the lag twice or so (due, then landed), so a lifetime of
300,000 deltas would leave about a million such events, which no run deletion removes (issue 43:
what Dagster holds stays bounded by a window, not by the lake's age).

What flows through: the instance's runless events of that asset and check. A retirement pass
(platform_assets/retirement.py) calls `trim_lag_reports`, which deletes all but the newest
`KEEP` of each kind, and of the observations of the source's Kafka topics (the sensor records
one when a topic's high-water marks move: about one per topic per delta), at most `limit` a
pass: on a SQLite instance their copies in the runless events' own file first, then from the
index (the event rows, their tags, the check's executions).

Guarantees: the newest reports stay (the UI's latest lag and check verdict, and `KEEP` points
of its plot); idempotent; killed between the runless file and the index, the next pass finds
the same reports in the index and finishes. A storage that is not one of Dagster's SQL event
logs is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
import sqlalchemy as db
from dagster._core.events import DagsterEventType

from platform_assets.lag import LAG_CHECK

# Dagster's SQL event log tables (1.13): the runless events have no API to delete them by.
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    AssetEventTagsTable,
    SqlEventLogStorageTable as Events,
)

KEEP = 1000  # reports of each kind kept per source: a few hundred deltas of lag history
RUNLESS = ""  # the run id Dagster gives an event reported outside a run
OBSERVATION, EVALUATION = DagsterEventType.ASSET_OBSERVATION.value, DagsterEventType.ASSET_CHECK_EVALUATION.value


def trim_lag_reports(instance: dg.DagsterInstance, source: str, *, keep: int = KEEP, limit: int = 2000,
                     topics: Sequence[dg.AssetKey] = ()) -> int:
    """Delete `source`'s lag reports but the newest `keep` of each kind, at most `limit` of each
    a call, and likewise the observations of its topics' assets (`topics`: what the sensor read,
    platform_assets/deltas/topic_observations.py); how many events it deleted."""
    storage = instance.event_log_storage
    if not hasattr(storage, "index_connection"):
        return 0
    key = dg.AssetKey([source, "snapshot"]).to_string()
    checks = AssetCheckExecutionsTable.c
    with storage.index_connection() as conn:
        # A check's evaluation events do not carry its asset key: it is in the check's
        # executions, which point at them.
        evaluated = conn.execute(_oldest(
            checks.id, checks.evaluation_event_storage_id, keep, limit,
            checks.run_id == RUNLESS, checks.asset_key == key, checks.check_name == LAG_CHECK)).fetchall()
    deleted = _delete(storage, EVALUATION, [row[1] for row in evaluated if row[1] is not None],
                      executions=[row[0] for row in evaluated])
    for observed_key in (key, *(k.to_string() for k in topics)):
        with storage.index_connection() as conn:
            observed = [row[0] for row in conn.execute(_oldest(
                Events.c.id, Events.c.id, keep, limit, Events.c.run_id == RUNLESS,
                Events.c.asset_key == observed_key, Events.c.dagster_event_type == OBSERVATION))]
        deleted += _delete(storage, OBSERVATION, observed, asset_key=observed_key)
    return deleted


def _delete(storage, kind: str, ids: list[int], *, executions: Sequence[int] = (), asset_key: str | None = None) -> int:
    """Delete the runless events `ids` of `kind` (and the check `executions` pointing at them)."""
    if not ids:
        return 0
    with storage.index_connection() as conn:
        stamps = [row[0] for row in conn.execute(db.select(Events.c.timestamp).where(Events.c.id.in_(ids)))]
    if getattr(storage, "is_run_sharded", False) and stamps:
        # SQLite: the same events in the runless file, with ids of their own; found by their
        # times (and asset, for observations: a tick observes several assets at once), and
        # deleted first: killed before the index, the next call finds them again.
        same = [Events.c.run_id == RUNLESS, Events.c.dagster_event_type == kind, Events.c.timestamp.in_(stamps)]
        if asset_key is not None:
            same.append(Events.c.asset_key == asset_key)
        with storage.run_connection(RUNLESS) as conn:
            conn.execute(Events.delete().where(*same))
    with storage.index_connection() as conn:
        conn.execute(AssetEventTagsTable.delete().where(AssetEventTagsTable.c.event_id.in_(ids)))
        if executions:
            conn.execute(AssetCheckExecutionsTable.delete().where(AssetCheckExecutionsTable.c.id.in_(list(executions))))
        conn.execute(Events.delete().where(Events.c.id.in_(ids)))
    return len(ids)


def _oldest(order, column, keep: int, limit: int, *where):
    """The rows (`order`, `column`) matching `where` but the newest `keep` by `order`, the oldest
    `limit` of them."""
    edge = db.select(order).where(*where).order_by(order.desc()).offset(keep).limit(1).scalar_subquery()
    return db.select(order, column).where(*where, order <= edge).order_by(order.asc()).limit(limit)
