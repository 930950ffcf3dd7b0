"""Each change-stream table's key columns as of a delta, read without the whole changelog.

What flows through: the `keys` rows of `lake.<source>_meta.changelog` (one per table and delta
with changes, partitioned by delta) and the summaries of the snapshot tables' commits ->
{lake table: key columns} as of delta `target`, and each snapshot table's last applied delta.

Why: the answer is, per table, its latest `keys` row at or before `target`. Read whole, that is
one file per delta, on every run: measured +6 ms per delta of the lake's age (0.11-0.16 s at
delta 10, 0.27-0.49 s at delta 35). Here only the rows from the lowest last applied delta of
the source's snapshot tables on are read (as the manifest is); a table with no row there takes
the key its newest snapshot commit applied by (``deltaport.keys.<namespace>.<table>``, or the
plain ``deltaport.keys`` of older commits: every MERGE records it, and
so does the empty commit of a delta whose changes were all duplicates or late). That is the
same answer: a table's `keys` row at delta d means d changed it, so its snapshot committed d
with the keys of d's run's target, which no later row before that table's last applied delta
contradicts (there is none, or it would be in the rows read).

When a table cannot be answered that way (a table with no snapshot yet, a commit from before
the key was recorded) or a run re-lands a delta some table is already past (its newest commit
may be of a later delta), the whole changelog is read, as it always was: the answer is never a
guess.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from resources.lake.cdc import KEYS_PROPERTY, at_mark, cdc_landed_deltas
from resources.lake.landed_mark import lake_landed_through
from resources.lake.layout import LakeLayout
from resources.lake.stream_progress import stream_tables_to_read
from resources.lake.stream_changelog import key_rows, keys_as_of, table_keys
from resources.spark.existence import namespace_exists
from resources.spark.iceberg import DELTA_PROPERTY, metadata_table
from resources.spark.iceberg_reads import recorded_property_sql, writer_progress
from resources.spark.unions import union_all

_log = logging.getLogger(__name__)


def recorded_keys(spark, idents: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """{ident: the key columns of its newest commit that records them}; a table none of whose
    commits does is left out. One query over the tables' snapshot metadata (their current
    metadata file, as the catalog holds it: no data file is read)."""
    return _newest_keys(spark, {ident: None for ident in idents})


def keys_before(spark, firsts: Mapping[str, int]) -> dict[str, tuple[str, ...]]:
    """{ident: the key columns its newest commit of a delta before `firsts[ident]` records}: the
    key a table had before a run whose first delta is that one. A table none of whose such
    commits says (new in the run, expired, made before keys were recorded) is left out. One
    round trip for every table (the snapshots metadata tables: no data file is read)."""
    return _newest_keys(spark, firsts)


def _newest_keys(spark, before: Mapping[str, int | None]) -> dict[str, tuple[str, ...]]:
    """{ident: the key columns of its newest commit recording them, of a delta before
    `before[ident]` when that is not None}, in one Spark Connect round trip."""
    from pyspark.sql import functions as F

    if not before:
        return {}
    parts = []
    for ident, first in before.items():
        keys = F.expr(recorded_property_sql(KEYS_PROPERTY, ident))
        wanted = keys.isNotNull()
        if first is not None:
            wanted = wanted & (F.col("summary")[DELTA_PROPERTY].cast("bigint") < int(first))
        parts.append(metadata_table(spark, ident, "snapshots").where(wanted)
                     .agg(F.max_by(keys, F.col("committed_at")).alias("keys")).select(F.lit(ident).alias("ident"), "keys"))
    rows = union_all(parts, by_name=True).collect()
    return {r["ident"]: tuple(json.loads(r["keys"])) for r in rows if r["keys"] is not None}


def snapshot_tables(spark, layout: LakeLayout, source: str) -> list[str]:
    """The lake tables that have a snapshot table in the source's namespace (none: [])."""
    if not namespace_exists(spark, layout.catalog, source):  # no snapshot made yet; asked, not failed
        return []
    namespace = ".".join("`" + part.replace("`", "``") + "`" for part in (layout.catalog, source))
    return sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {namespace}").collect())


@dataclass(frozen=True)
class SnapshotProgress:
    """A source's snapshot tables as a writer reads them before it applies deltas: {table: its
    snapshot ident}, {ident: last applied delta} (`writer_progress`, missing tags repaired), and
    the live rows and tombstones its newest commits record. `at_mark`: the idents whose progress
    the source's mark gave, not read (resources/lake/stream_progress.py): in `progress` at the
    mark, with no rows or tombstones; the run leaves them alone."""

    idents: dict[str, str]
    progress: dict[str, int | None]
    sizes: dict[str, int]
    tombstones: dict[str, int]
    at_mark: frozenset[str] = frozenset()
    # The source's landed mark `progress` stands on: the state store's when it is the delta before
    # the run, else the lake's own (`landed_mark.lake_landed_through`); None: neither.
    floor: int | None = None

    def untouched(self) -> list[str]:
        """The tables whose progress the mark gave."""
        return sorted(t for t, ident in self.idents.items() if ident in self.at_mark)


def snapshot_progress(spark, layout: LakeLayout, source: str, *, mark: int | None = None, first: int | None = None,
                      run_changes: frozenset[str] = frozenset()) -> SnapshotProgress:
    """Read the source's snapshot tables' progress (the tables, then their commits and tags).
    Only a run's snapshot writes those tables, so a run may read this while its increments and
    changelog land. With the source's `landed_through` `mark` the delta before the run's `first`,
    the manifest from the mark on is read too, and only the tables it or the run's decoded
    changes (`run_changes`) name are read; the others are at the mark (stream_progress.py).
    A delta commits only to the tables it changes, so a table's own last delta may be below the
    mark: every table is taken to be at least at it (`cdc.at_mark`); without a usable state
    store mark, at the lake's own (`landed_mark.lake_landed_through`)."""
    tables = snapshot_tables(spark, layout, source)
    idents = {t: layout.snapshot(source, t) for t in tables}
    read = None
    trusted = bool(tables) and mark is not None and first == mark + 1
    if trusted:
        read = stream_tables_to_read(tables, mark=mark, first=first, run_changes=run_changes,
                                     landed=cdc_landed_deltas(spark, layout, source, since=mark))
    asked = list(idents.values()) if read is None else [idents[t] for t in tables if t in read]
    sizes: dict[str, int] = {}
    tombstones: dict[str, int] = {}
    progress = writer_progress(spark, asked, sizes=sizes, tombstones=tombstones) if asked else {}
    at_mark_ = frozenset(i for i in idents.values() if i not in asked)
    floor = mark if trusted and read is not None else (lake_landed_through(spark, layout, source) if tables else None)
    return SnapshotProgress(idents, at_mark({**progress, **dict.fromkeys(at_mark_, mark)}, floor), sizes,
                            tombstones, at_mark_, floor)


def current_keys(spark, layout: LakeLayout, source: str, target: int, *, sizes: dict[str, int] | None = None,
                 tombstones: dict[str, int] | None = None, read: SnapshotProgress | None = None,
                 ) -> tuple[dict[str, tuple[str, ...]], dict[str, int | None]]:
    """({lake table: key columns} of every table with changes at or before `target`, the latest
    row winning, as `table_keys` gives it; {snapshot ident: its last applied delta} of the
    tables that have a snapshot, `last_applied_deltas` with missing tags repaired, for
    `apply_cdc_through(progress=)`). Module docstring: what is read, and when everything is.
    `sizes`, `tombstones`: filled by the same query, as `writer_progress` fills them. `read`:
    the snapshot tables' progress as `snapshot_progress` read it already (default: read now);
    the changelog's rows are read now, so the run's own changelog must have landed."""
    read = snapshot_progress(spark, layout, source) if read is None else read
    if sizes is not None:
        sizes.update(read.sizes)
    if tombstones is not None:
        tombstones.update(read.tombstones)
    idents, progress = read.idents, read.progress
    tables = [t for t, i in idents.items() if i not in read.at_mark]  # the mark's tables need no key: they get nothing
    known = [progress.get(i) for i in idents.values()]
    if not known or None in known or max(known) > target:  # no snapshot yet, or re-running the past
        return table_keys(spark, layout, source, target), progress
    keys = keys_as_of(key_rows(spark, layout, source, target, since=min(known)), target)
    keys = {t: k for t, k in keys.items() if idents.get(t) not in read.at_mark}
    lacking = [t for t in tables if t not in keys]
    recorded = recorded_keys(spark, [idents[t] for t in lacking])
    unknown = [t for t in lacking if idents[t] not in recorded]
    if unknown:
        _log.info("%s: no commit of %s records its key columns (made before deltaport recorded them); "
                  "reading the whole changelog", source, ", ".join(unknown))
        return table_keys(spark, layout, source, target), progress
    keys.update({t: recorded[idents[t]] for t in lacking})
    return dict(sorted(keys.items())), progress

