"""Reading deltaport's Iceberg tables by delta: each table's last applied delta, its `delta_<N>`
tags and folded commits, and the states they name (a tagged snapshot, the state before a fold).
The conventions these read (summary properties, tags, folds) are written by
`resources/spark/iceberg.py`, whose docstring says what they guarantee.

Which state answers "as of delta N" is not decided here: a delta commits only to the tables it
changes (issue 57), so a table has no tag for a delta that left it alone, and the answer needs the
source's landed delta and the table's history too (`resources/lake/as_of.py`, the rules;
`resources/lake/history_read.py: state_as_of`, the Spark reader that applies them). This module
gathers the table's facts for them in one query (`last_applied_deltas(tags=...)`, `folded_commits`)
and reads the state they choose (`tagged_state`, `inside_fold`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from resources.spark import existence
from resources.spark.session_properties import own_property
from resources.spark.iceberg import (
    LIVE_ROWS_SQL,
    DELTA_PROPERTY,
    DELTAS_PROPERTY,
    DeltaNotFoundError,
    TableNotFoundError,
    _col,
    _quote,
    _sql_str,
    commit_delta,
    delta_tag,
    metadata_table,
)
from resources.spark.unions import union_all

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

_log = logging.getLogger("resources.spark.iceberg")


def last_applied_delta(spark: SparkSession, ident: str) -> int | None:
    """The delta recorded by the newest deltaport commit in the table's current history (the
    current snapshot's summary, unless maintenance such as compaction committed after it), or
    None when no delta was ever committed. Raises `TableNotFoundError` for a missing table."""
    found = last_applied_deltas(spark, [ident])
    if ident not in found:
        raise TableNotFoundError(f"Iceberg table {ident} does not exist")
    return found[ident]


def _newest_delta_commits(rows: Sequence, counted: str | None = None) -> dict:
    """{ident: the row of its newest commit recording a delta} among `last_applied_deltas`'s
    rows (of those whose `counted` column is not NULL, if given); the later row wins a tie."""
    newest: dict = {}
    for r in rows:
        if r["kind"] == "COMMIT" and r["delta"] is not None and (counted is None or r[counted] is not None) \
                and r["delta"] >= newest.get(r["ident"], {"delta": -1})["delta"]:
            newest[r["ident"]] = r
    return newest


def last_applied_deltas(spark: SparkSession, idents: Sequence[str], *, repair_tags: bool = False,
                        sizes: dict[str, int] | None = None,
                        tombstones: dict[str, int] | None = None,
                        tags: dict[str, dict[int, int]] | None = None) -> dict[str, int | None]:
    """`last_applied_delta` of several tables at once: {ident: delta or None} for the tables
    that exist (a missing one is left out). One query, plain scans of metadata tables (a join
    or a LIMIT per table costs more planning and jobs than the rows it saves): every table's
    current snapshot, `delta_<N>` tags and commits recording a delta. The newest such tag or
    commit on the current snapshot is the answer (a delta that left the table unchanged is
    recorded by its tag alone: `tag_unchanged`); when the current snapshot has neither
    (maintenance committed after the last delta), the newest tag is: once maintenance has
    expired the commits between, the current snapshot's ancestry no longer reaches the delta's.
    Only a table with neither costs a walk of its history. The rows grow with the tags kept
    (`lake.maintenance.keep_tags` on tables with history).

    `repair_tags=True` (writers, before they go on): a last applied delta whose commit lacks its
    ``delta_<N>`` tag (the process died between the two) is tagged now, so reading as of N
    stays exact; it costs nothing when every tag is there.

    `sizes`: filled with {ident: live rows} as the summary of each table's current snapshot
    counts them (`LIVE_ROWS_SQL`), or its newest delta commit's when the current one is neither
    a delta's nor a compaction's; from the same query. `tombstones`: filled with {ident: the
    `TOMBSTONES_PROPERTY` of its newest delta commit} for the tables whose newest delta commit
    records it (a change stream's snapshot tables: their rows count tombstones too). `tags`:
    filled with {ident: {delta: snapshot id}} of every existing table's `delta_<N>` tags (what
    `delta_tags` reads), from the same query: a reader as of a delta needs both."""
    existing = [i for i in dict.fromkeys(idents) if _refreshed(spark, i)]
    if not existing:
        return {}
    delta = _sql_str(DELTA_PROPERTY)
    parts = []
    for ident in existing:
        name = _sql_str(ident)
        parts += [
            metadata_table(spark, ident, "refs")
            .where("(type = 'BRANCH' AND name = 'main') OR (type = 'TAG' AND name RLIKE '^delta_[0-9]+$')")
            .selectExpr(f"{name} AS ident", "type AS kind", "snapshot_id",
                        "CASE WHEN type = 'TAG' THEN CAST(substring(name, 7) AS BIGINT) END AS delta",
                        "CAST(NULL AS BIGINT) AS live_rows", "CAST(NULL AS BIGINT) AS tombstones"),
            metadata_table(spark, ident, "snapshots").where(f"summary[{delta}] IS NOT NULL OR operation = 'replace'")
            .selectExpr(f"{name} AS ident", "'COMMIT' AS kind", "snapshot_id",
                        f"CAST(summary[{delta}] AS BIGINT) AS delta", f"{LIVE_ROWS_SQL} AS live_rows",
                        f"CAST({recorded_property_sql(TOMBSTONES_PROPERTY, ident)} AS BIGINT) AS tombstones")]
    rows = union_all(parts).collect()
    current = {r["ident"]: r["snapshot_id"] for r in rows if r["kind"] == "BRANCH"}
    if tags is not None:
        for ident in existing:
            tags[ident] = dict(sorted((int(r["delta"]), int(r["snapshot_id"])) for r in rows
                                      if r["ident"] == ident and r["kind"] == "TAG" and r["delta"] is not None))
    if tombstones is not None:
        newest = _newest_delta_commits(rows)
        tombstones.update({ident: int(r["tombstones"]) for ident, r in newest.items() if r["tombstones"] is not None})
    if sizes is not None:
        # The current snapshot's count; else (it is neither a delta's commit nor a compaction's)
        # the newest delta commit's that has one.
        now = {r["ident"]: r["live_rows"] for r in rows
               if r["kind"] == "COMMIT" and r["live_rows"] is not None and r["snapshot_id"] == current.get(r["ident"])}
        counted = {ident: r["live_rows"] for ident, r in _newest_delta_commits(rows, "live_rows").items()} | now
        sizes.update({ident: max(0, int(n)) for ident, n in counted.items()})
    # A delta's tag is written right after its commit and deltas apply in order, so the newest
    # tag is the last applied delta even when maintenance committed since and expired the
    # commits in between (the current snapshot's ancestry then no longer reaches the delta).
    tagged_newest: dict[str, int] = {}
    for r in rows:
        if r["kind"] == "TAG" and r["delta"] is not None:
            tagged_newest[r["ident"]] = max(tagged_newest.get(r["ident"], -1), int(r["delta"]))
    newest: dict[str, int] = {}
    tagged: set[tuple[str, int]] = set()  # (ident, delta) tagged on the current snapshot
    for r in rows:
        if r["kind"] != "BRANCH" and r["delta"] is not None and r["snapshot_id"] == current.get(r["ident"]):
            newest[r["ident"]] = max(newest.get(r["ident"], -1), int(r["delta"]))
            if r["kind"] == "TAG":
                tagged.add((r["ident"], int(r["delta"])))
    out: dict[str, int | None] = {}
    for ident in existing:
        if ident not in current:  # no snapshot yet
            out[ident] = None
        elif ident in newest and newest[ident] >= tagged_newest.get(ident, -1):
            out[ident] = newest[ident]
            if repair_tags and (ident, newest[ident]) not in tagged:
                _log.warning("%s: delta %d was committed but not tagged (a process died between the two); "
                             "tagging it now", ident, newest[ident])
                spark.sql(f"ALTER TABLE {_quote(ident)} CREATE OR REPLACE TAG `{delta_tag(newest[ident])}` "
                          f"AS OF VERSION {int(current[ident])}")
        elif ident in tagged_newest:  # maintenance committed after the last delta (its tag came before)
            out[ident] = tagged_newest[ident]
        else:
            out[ident] = _newest_committed_delta(spark, ident)
            if repair_tags:
                repair_delta_tags(spark, ident)
    return out


def writer_progress(spark: SparkSession, idents: Sequence[str], *, sizes: dict[str, int] | None = None,
                    tombstones: dict[str, int] | None = None) -> dict[str, int | None]:
    """`last_applied_deltas` as a writer asks it before it applies deltas (missing tags
    repaired); a table big enough turns generated code on for the session
    (`codegen.generate_code_for`): the apply and the checks that follow read it whole.
    `sizes`, `tombstones`: filled as `last_applied_deltas` fills them."""
    from resources.spark.codegen import generate_code_for

    sizes = {} if sizes is None else sizes
    progress = last_applied_deltas(spark, idents, repair_tags=True, sizes=sizes, tombstones=tombstones)
    generate_code_for(spark, max(sizes.values(), default=0))
    return progress




# A change stream's snapshot commit records the table's tombstones after it (`resources/lake/cdc.py`):
# its rows as `LIVE_ROWS_SQL` counts them include them, its live rows do not.
TOMBSTONES_PROPERTY = "deltaport.tombstones"


def recorded_property_sql(name: str, ident: str) -> str:
    """`session_properties.recorded_property` as a SQL expression over a snapshots metadata
    table's `summary`: table `ident`'s own key, else the plain name of older commits."""
    return f"coalesce(summary[{_sql_str(own_property(name, ident))}], summary[{_sql_str(name)}])"


def live_rows(summary: Mapping[str, str]) -> int | None:
    """`LIVE_ROWS_SQL` of a commit summary already at hand (None: the summary has no totals)."""
    if "total-records" not in summary:
        return None

    def total(name: str) -> int:
        return int(summary.get(name) or 0)

    return max(0, total("total-records") - total("total-position-deletes") - total("total-equality-deletes"))


def _refreshed(spark: SparkSession, ident: str) -> bool:
    """Refresh the session's cached metadata of `ident` (another process may have committed
    since); False when the table does not exist."""
    _quote(ident)
    return existence.refreshed(spark, ident)


def _newest_committed_delta(spark: SparkSession, ident: str) -> int | None:
    """The delta of the newest commit in the current history that records one (the current
    snapshot is a maintenance commit, or a crash came between a commit and its tag)."""
    quoted = _quote(ident)
    rows = spark.sql(
        f"SELECT CAST(s.summary[{_sql_str(DELTA_PROPERTY)}] AS BIGINT) AS delta FROM {quoted}.`history` h "
        f"JOIN {quoted}.`snapshots` s ON h.snapshot_id = s.snapshot_id "
        f"WHERE h.is_current_ancestor AND s.summary[{_sql_str(DELTA_PROPERTY)}] IS NOT NULL "
        "ORDER BY h.made_current_at DESC LIMIT 1").collect()
    return int(rows[0]["delta"]) if rows else None


def tag_unchanged(spark: SparkSession, ident: str, delta_num: int, *, refresh: bool = True) -> bool:
    """Record delta N for a table it leaves as it is: the tag ``delta_<N>`` on the current
    snapshot, one metadata commit and no data commit (`last_applied_delta` reads it back).
    False, with nothing done, when the table has no snapshot yet (the caller commits instead).
    `refresh=False`: the caller refreshed the table since anyone else could have committed to it
    (a run that holds its source and read the table's progress): one round trip saved."""
    from pyspark.errors import PySparkException

    quoted = _quote(ident)
    if refresh:
        spark.catalog.refreshTable(ident)
    try:  # without AS OF VERSION, Iceberg tags the current snapshot: no query to find it
        spark.sql(f"ALTER TABLE {quoted} CREATE OR REPLACE TAG `{delta_tag(delta_num)}`")
    except PySparkException as exc:
        if "main has no snapshot" in str(exc):  # Iceberg's words for a table never written
            return False
        raise
    return True


def record_unchanged(spark: SparkSession, ident: str, schema: StructType, delta_num: int, *, new: bool = False,
                     refresh: bool = True) -> None:
    """Record delta N in a table it leaves as it is: `tag_unchanged`, or, when the table has no
    snapshot yet, an empty commit (summary and tag, as `commit_delta` makes them). `new`: just
    created, so that commit at once (a tag on no snapshot is a failed call, logged at ERROR).
    `refresh`: as `tag_unchanged`'s."""
    if new or not tag_unchanged(spark, ident, delta_num, refresh=refresh):
        commit_delta(spark, ident, spark.createDataFrame([], schema), delta_num=delta_num, mode="append")


def delta_tags(spark: SparkSession, ident: str) -> dict[int, int]:
    """``{delta number: snapshot id}`` for every ``delta_<N>`` tag of the table, as committed now
    (the session's cached metadata is refreshed first: a long-lived session would otherwise
    keep reading the tags it saw when it first loaded the table)."""
    quoted = _quote(ident)
    spark.catalog.refreshTable(ident)
    rows = spark.sql(f"SELECT name, snapshot_id FROM {quoted}.`refs` WHERE type = 'TAG'").collect()
    out = {}
    for name, snapshot_id in rows:
        m = re.fullmatch(r"delta_(\d+)", name)
        if m:
            out[int(m.group(1))] = int(snapshot_id)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class FoldedCommit:
    """A state-table commit that applied several deltas at once (`merge_upserts(folded=...)`):
    the state after each of `deltas` but the last is its parent's plus those deltas' changes."""

    deltas: tuple[int, ...]
    snapshot_id: int
    parent_id: int | None
    summary: Mapping[str, str] = field(default_factory=dict)  # the commit's whole summary


def folded_commits(spark: SparkSession, ident: str) -> list[FoldedCommit]:
    """The table's folded commits, oldest first: one plain scan of its snapshots (a join with
    its history, to leave out commits a rollback undid, costs seconds; deltaport never rolls
    back, and a newer commit of the same deltas comes later in the list)."""
    quoted = _quote(ident)
    rows = spark.sql(
        f"SELECT snapshot_id, parent_id, summary FROM {quoted}.`snapshots` "
        f"WHERE summary[{_sql_str(DELTAS_PROPERTY)}] IS NOT NULL ORDER BY committed_at").collect()
    return [FoldedCommit(tuple(_ranges_parse(r["summary"][DELTAS_PROPERTY])), int(r["snapshot_id"]),
                         None if r["parent_id"] is None else int(r["parent_id"]), dict(r["summary"]))
            for r in rows]


@dataclass(frozen=True)
class InsideFold:
    """A state table as of a delta inside a folded commit, before the fold's changes: `base`,
    the state before the fold in the fold commit's columns (`schema`; columns the fold added are
    NULL), for the caller to apply the fold's deltas up to the one asked for."""

    fold: FoldedCommit
    schema: StructType
    base: DataFrame


def state_as_of_delta(spark: SparkSession, ident: str, delta_num: int) -> DataFrame | InsideFold:
    """The state table `ident` right after `delta_num` by its own tags and folds alone: its
    ``delta_<N>`` tag, or, for a delta inside a folded commit, `inside_fold`. Raises
    `DeltaNotFoundError` when neither records N. Exact only on a table tagged by every delta (a
    lake written before issue 57, as the benches make); a reader as of a delta goes through
    `resources/lake/history_read.py: state_as_of`, which also answers the deltas that left the
    table alone."""
    tags = delta_tags(spark, ident)
    if delta_num in tags:
        return tagged_state(spark, ident, tags[delta_num])
    covering = [c for c in folded_commits(spark, ident) if delta_num in c.deltas]
    if not covering:
        return read_as_of_delta(spark, ident, delta_num)  # raises DeltaNotFoundError, naming the tags
    return inside_fold(spark, ident, covering[-1], tags)


def tagged_state(spark: SparkSession, ident: str, snapshot_id: int) -> DataFrame:
    """The table as snapshot `snapshot_id` holds it (time travel: in that snapshot's own schema)."""
    return spark.sql(f"SELECT * FROM {_quote(ident)} VERSION AS OF {int(snapshot_id)}")


def inside_fold(spark: SparkSession, ident: str, fold: FoldedCommit, tags: Mapping[int, int]) -> InsideFold:
    """The state before `fold`, in the fold commit's columns, for the caller to apply the fold's
    deltas up to the one asked for: the newest tag below the fold's first delta (a delta that left
    the table alone has no tag, so the tag of the delta just before may not exist; a tag keeps its
    snapshot from expiring should maintenance commit in between), else the fold's parent, else
    empty (the table was born in the fold)."""
    from pyspark.sql import functions as F

    schema = tagged_state(spark, ident, fold.snapshot_id).schema
    below = [m for m in tags if m < fold.deltas[0]]
    before = tags[max(below)] if below else fold.parent_id
    if before is None:
        return InsideFold(fold, schema, spark.createDataFrame([], schema))
    base = tagged_state(spark, ident, before)
    have = {c.lower(): c for c in base.columns}
    base = base.select(*[F.col(_col(have[f.name.lower()])).cast(f.dataType).alias(f.name) if f.name.lower() in have
                         else F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields])
    return InsideFold(fold, schema, base)


def _ranges_parse(text: str) -> list[int]:
    """"3-5,9" -> [3, 4, 5, 9] (`_ranges_text` backwards)."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def read_as_of_delta(spark: SparkSession, ident: str, delta_num: int) -> DataFrame:
    """The table as its ``delta_<N>`` tag holds it (time travel by the tag: delta `delta_num`
    changed the table). Raises `DeltaNotFoundError` naming the deltas that are tagged; a delta
    that left the table alone has no tag (`history_read.state_as_of` answers it)."""
    quoted = _quote(ident)
    tags = delta_tags(spark, ident)
    if int(delta_num) not in tags:
        raise DeltaNotFoundError(
            f"{ident} has no tag {delta_tag(delta_num)} (tagged deltas: {list(tags) or 'none'})"
        )
    return spark.sql(f"SELECT * FROM {quoted} VERSION AS OF {_sql_str(delta_tag(delta_num))}")


def repair_delta_tags(spark: SparkSession, ident: str) -> list[int]:
    """Tag ``delta_<N>`` the newest delta committed in the current history if its commit is not
    tagged so (a process died between the commit and its tag); returns the delta tagged now, if
    any. Only the newest: each delta is tagged before the next one is applied, so no older tag
    can be missing that way, and older tags that maintenance expired must stay expired."""
    quoted = _quote(ident)
    rows = spark.sql(
        f"SELECT s.snapshot_id, s.summary[{_sql_str(DELTA_PROPERTY)}] AS delta FROM {quoted}.`history` h "
        f"JOIN {quoted}.`snapshots` s ON h.snapshot_id = s.snapshot_id "
        f"WHERE h.is_current_ancestor AND s.summary[{_sql_str(DELTA_PROPERTY)}] IS NOT NULL "
        "ORDER BY h.made_current_at DESC LIMIT 1"
    ).collect()
    if not rows:
        return []
    snapshot_id, delta = int(rows[0][0]), int(rows[0][1])
    if delta_tags(spark, ident).get(delta) == snapshot_id:
        return []
    spark.sql(f"ALTER TABLE {quoted} CREATE OR REPLACE TAG `{delta_tag(delta)}` AS OF VERSION {snapshot_id}")
    return [delta]
