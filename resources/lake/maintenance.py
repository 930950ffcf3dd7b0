"""Table maintenance: what keeps a table's read cost and its files bounded as the lake ages.

What flows through: one source's Iceberg tables. Out come, per table, the files and bytes
before and after, what was done, and the seconds it took (`TableMaintenance`). Three actions:

- **Compact.** Snapshot tables take merge-on-read MERGEs: each adds a position-delete file and a
  small data file, and every reader merges all of them. The table's delete files are counted
  from its `files` metadata table, and so are its data files: every MERGE also writes a small
  one (bench/maintenance_bench.py: 200 one-row deltas left 204 data files but 4 delete files,
  and a full read 4.95x a fresh copy's). Once either count reaches its threshold
  (`delete_files_threshold`, `data_files_threshold`),
  `rewrite_data_files` rewrites the data files that carry deletes (`delete-file-threshold` 1)
  and bin-packs small files; `rewrite_position_delete_files` then drops the delete files left
  dangling.
- **Compact history.** A history table gets a small file per delta (or range run); once it holds
  `data_files_threshold` data files, those of the deltas its snapshot table applied are rewritten
  into one per partition (`resources/lake/history_layout.py`: spans of
  `lake.history_partition_deltas` deltas), bin-packed or sorted by `history_sort_order`.
- **Expire.** On increment, history and meta tables, which are read by `delta_num` and never by
  time travel, snapshots older than `expire_after_seconds` expire, keeping the current one. This
  frees the files that re-runs and compactions replaced, and keeps each metadata file small.
  On snapshot tables, the same age applies but `delta_<N>` tags keep their snapshots (Iceberg
  never expires a referenced snapshot). A snapshot table whose history answers a delta
  (`resources/lake/history_read.py`: from its `deltaport.history-from` on) needs no tag for it,
  so its tags are dropped first (`as_of.tags_to_expire`: those below the newest tag at or below
  the source's landed delta - `keep_tags`, read once per source from the lake's mark), and their
  snapshots expire with the rest: the metadata file holds about `keep_tags` snapshots and refs
  whatever the lake's age, the newest tag at or below each of the last `keep_tags` deltas stays
  (a delta tags only the tables it changes), and `deltaport read --as-of-delta N` stays exact
  for every N. Tags from before the history began are kept (reads need them).
- **Orphans.** `remove_orphan_files` runs only when asked (`orphans=True`): it lists every file
  under the table's location, which costs O(table files); on object storage by key prefix
  through the table's FileIO (`prefix_listing`), since there is no folder to list. It only removes files older than
  `orphan_age_seconds`, 3 days by default, far beyond any write in flight.

A pass reads what every table holds in one query first (`resources/lake/maintenance_states.py`)
and then calls, per table, only what is due.

Guarantees:
- Each action is one Iceberg commit or none. A process killed in the middle leaves the table as
  it was, or compacted; the files such a kill leaves behind are orphans for the next
  orphan pass.
- Compaction changes files, never rows. The current state and every tagged state read the same
  before and after (`tests/integration/test_maintenance.py`).
- Maintenance must not race a writer of the same table. The caller runs it under the source's
  one-run-at-a-time rule (inside the source's own delta run).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

from resources.failpoints import failpoint
from resources.lake.locations import is_object_store
from resources.lake.layout import LakeLayout
from resources.lake.stream_keys import snapshot_tables
from resources.lake.history_layout import compact, snapshot_of
from resources.lake.maintenance_settings import MaintenanceSettings
from resources.lake.maintenance_states import TableState, table_states
from resources.lake import as_of
from resources.lake.landed_mark import lake_landed_through
from resources.lake.prostore_history import history_start
from resources.spark.iceberg import _quote, _sql_str, delta_tag, table_exists
from resources.spark.iceberg_reads import last_applied_deltas


@dataclass
class TableMaintenance:
    ident: str
    kind: str  # "snapshot" | "history" | "increment" | "meta"
    data_files: tuple[int, int] = (0, 0)  # before, after
    tags: tuple[int, int] = (0, 0)
    delete_files: tuple[int, int] = (0, 0)
    bytes: tuple[int, int] = (0, 0)
    done: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def text(self) -> str:
        what = ", ".join(self.done) or "nothing due"
        tags = f", tags {self.tags[0]} -> {self.tags[1]}" if self.tags[0] else ""
        return (f"{self.ident}: {what}; data files {self.data_files[0]} -> {self.data_files[1]}{tags}, delete files "
                f"{self.delete_files[0]} -> {self.delete_files[1]}, {self.bytes[0]} -> {self.bytes[1]} bytes "
                f"({self.seconds:.1f} s)")


def file_stats(spark, ident: str) -> tuple[int, int, int]:
    """(data files, delete files, bytes) of the table's current snapshot, from its `files` table."""
    rows = spark.sql(f"SELECT content, count(*) AS n, sum(file_size_in_bytes) AS b FROM {_quote(ident)}.`files` "
                     "GROUP BY content").collect()
    data = sum(int(r["n"]) for r in rows if r["content"] == 0)
    deletes = sum(int(r["n"]) for r in rows if r["content"] != 0)
    return data, deletes, sum(int(r["b"] or 0) for r in rows)


def _call(spark, ident: str, procedure: str, args: str):
    _quote(ident)  # checks the identifier's parts
    catalog, rest = ident.split(".", 1)
    return spark.sql(f"CALL `{catalog}`.system.{procedure}(table => {_sql_str(rest)}{args})").collect()


def _timestamp(seconds_ago: float) -> str:
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_ago)
    return f"TIMESTAMP {_sql_str(when.strftime('%Y-%m-%d %H:%M:%S.%f'))}"


def maintain_table(spark, ident: str, kind: str, settings: MaintenanceSettings) -> TableMaintenance | None:
    """Maintain one table (None when it does not exist). See the module docstring."""
    if not table_exists(spark, ident):
        return None
    started = time.monotonic()
    spark.catalog.refreshTable(ident)
    state = table_states(spark, [ident], _timestamp(settings.expire_after_seconds))[ident]
    return _maintain(spark, ident, kind, settings, state, time.monotonic() - started)


def _maintain(spark, ident: str, kind: str, settings: MaintenanceSettings, state: TableState,
              spent: float, landed: int | None = None) -> TableMaintenance:
    """Maintain one table known by `state` (read `spent` seconds ago for it): only what is due
    costs a call (resources/lake/maintenance_states.py). `landed`: the source's landed delta, for
    a snapshot table's tags (`expire_tags`)."""
    started = time.monotonic() - spent
    data0, deletes0, bytes0 = state.files if state.files is not None else file_stats(spark, ident)
    out = TableMaintenance(ident, kind)
    committed = False  # a commit of this pass leaves an older snapshot behind: expire after it
    if kind == "snapshot" and (deletes0 >= settings.delete_files_threshold
                               or data0 >= settings.data_files_threshold):
        failpoint("maintenance.compact")
        _call(spark, ident, "rewrite_data_files", ", options => map('delete-file-threshold', '1')")
        # The delete files of the rewritten data files now point at no live file, but stay
        # listed (and opened by readers) until rewritten away: measured on Iceberg 1.11, the
        # option remove-dangling-deletes of rewrite_data_files removed none of them.
        _call(spark, ident, "rewrite_position_delete_files", ", options => map('rewrite-all', 'true')")
        out.done.append("compacted")
        committed = True
    if kind == "history" and data0 >= settings.data_files_threshold:
        last = last_applied_deltas(spark, [snapshot_of(ident)]).get(snapshot_of(ident))
        if last is not None:
            failpoint("maintenance.compact_history")
            if compact(spark, ident, last, sort_order=settings.history_sort_order):
                out.done.append("compacted")
                committed = True
    dropped: list[int] = []
    if kind == "snapshot":
        dropped = expire_tags(spark, ident, state.tags, settings.keep_tags, landed)
        out.tags = (len(state.tags), len(state.tags) - len(dropped))
        if dropped:
            out.done.append(f"{len(dropped)} tags dropped")
    if committed or state.expirable(dropped):
        # Both times are the session's (UTC) clock; retain_last keeps the current snapshot whatever its age.
        expired = _call(spark, ident, "expire_snapshots",
                        f", older_than => {_timestamp(settings.expire_after_seconds)}, retain_last => 1")
        removed = sum(int(v or 0) for r in expired for k, v in r.asDict().items() if k.startswith("deleted_"))
        if removed:
            out.done.append(f"expired ({removed} files deleted)")
    if settings.orphans:
        # On object storage there is no folder to list through Hadoop's file system (and no
        # s3:// FileSystem on the server): the table's FileIO lists its location's key prefix.
        listing = ", prefix_listing => true" if is_object_store(table_location(spark, ident)) else ""
        orphans = _call(spark, ident, "remove_orphan_files",
                        f", older_than => {_timestamp(settings.orphan_age_seconds)}{listing}")
        if orphans:
            out.done.append(f"{len(orphans)} orphan files removed")
    # Only a compaction changes the current snapshot's files (expiry, tags and orphans never do).
    if committed:
        spark.catalog.refreshTable(ident)
        data1, deletes1, bytes1 = file_stats(spark, ident)
    else:
        data1, deletes1, bytes1 = data0, deletes0, bytes0
    out.data_files, out.delete_files, out.bytes = (data0, data1), (deletes0, deletes1), (bytes0, bytes1)
    out.seconds = time.monotonic() - started
    return out


def table_location(spark, ident: str) -> str | None:
    """The table's location, as DESCRIBE TABLE EXTENDED gives it (a query that does not fail for
    a table that exists)."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {_quote(ident)}").collect()
    return next((r["data_type"] for r in rows if r["col_name"] == "Location"), None)


def expire_tags(spark, ident: str, tags: dict[int, int], keep: int, landed: int | None = None) -> list[int]:
    """Drop the `delta_<N>` tags that the table's history makes needless (`as_of.tags_to_expire`):
    those of deltas from its `history_start` - 1 on, below the newest tag at or below `landed` -
    `keep`, so every delta still readable by tag keeps the newest tag at or below it, and the
    table's newest tag stays. `landed`: the source's landed delta (`lake_landed_through`); a
    lake without the mark counts from the table's newest tag (it was then tagged every delta).
    Returns the deltas whose tags were dropped."""
    if not tags:
        return []
    landed = as_of.source_landed(landed, max(tags))
    keep = max(1, keep)
    # None droppable even if the history covered every tag: no need to ask it.
    if not as_of.tags_to_expire(list(tags), landed=landed, keep_tags=keep, history_from=min(tags) + 1):
        return []
    start = history_start(spark, ident)
    dropped = as_of.tags_to_expire(list(tags), landed=landed, keep_tags=keep, history_from=start)
    for n in dropped:  # one metadata commit each: at most the deltas since the last pass, once steady
        spark.sql(f"ALTER TABLE {_quote(ident)} DROP TAG IF EXISTS `{delta_tag(n)}`")
    return dropped


def due(deltas, every: int) -> bool:
    """Whether a run of `deltas` crosses a multiple of `every` (delta 0 never does)."""
    return every > 0 and any(n > 0 and n % every == 0 for n in deltas)


# A source's namespaces and what their tables are (LakeLayout; `_marts`: platform_assets/build_on.py).
_NAMESPACES = (("", "snapshot"), ("_increment", "increment"), ("_history", "history"), ("_meta", "meta"),
               ("_marts", "meta"))


def maintain_source(spark, catalog: str, source: str, settings: MaintenanceSettings) -> list[TableMaintenance]:
    """Maintain every table of `source`, one after the other; what was found and done per table.
    What every table holds is read first, in one query (`table_states`); the seconds of that
    read are shared out evenly among the tables."""
    layout, tables = LakeLayout(catalog), []
    for suffix, kind in _NAMESPACES:
        namespace = f"{source}{suffix}"
        for table in snapshot_tables(spark, layout, namespace):  # SHOW TABLES IN <catalog>.<namespace>
            tables.append((f"{catalog}.{namespace}.{table}", kind))
    if not tables:
        return []
    started = time.monotonic()
    for ident, _ in tables:
        spark.catalog.refreshTable(ident)  # another session's commits: this one's cache may predate them
    states = table_states(spark, [ident for ident, _ in tables], _timestamp(settings.expire_after_seconds))
    # Read once for the source: a delta tags only the tables it changes, so a table's newest tag
    # is not how far the source has landed (None: a lake without the mark, each table's own).
    landed = lake_landed_through(spark, layout, source)
    share = (time.monotonic() - started) / len(tables)
    out = []
    for ident, kind in tables:
        out.append(_maintain(spark, ident, kind, settings, states[ident], share, landed))
        failpoint("maintenance.table_done")
    return out
