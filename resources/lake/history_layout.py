"""How a history table's closed versions are laid out in files, so its cost stays bounded as the
lake ages (issue 30).

What flows through: a history table (`lake.<src>_history.<t>`, resources/lake/prostore_history.py)
and, for compaction, its snapshot table's last applied delta. Out: the table's partition spec
and its files.

Why not a partition per delta: every delta appends a small file, and compaction
(rewrite_data_files) never merges files of two partitions, so a table partitioned by
identity(delta_num) kept a file per delta forever, and an as-of read of an old delta opened one
per later delta (20,000 at age 20,000); a range fold's write held a file open per delta of the
range (a fold of 500 deltas ran the Spark server out of heap).

Guarantees:
- a new history table is partitioned by `truncate(K, delta_num)`: K consecutive closing deltas
  per partition (`LakeLayout.history_span`, config `lake.history_partition_deltas`, 1000 by
  default; 0 keeps one partition per delta). A reader's `delta_num >= n + 1` (history_forms)
  prunes whole partitions under either spec.
- a table still partitioned by identity(delta_num) is evolved to the same spec the first time
  a writer meets it (`ensure_layout`: one metadata commit; its files keep their old spec and
  read as before until compaction rewrites them into the new partitions). A table partitioned
  another way is left as it is.
- writes replace `delta_num >= a` for a run of deltas a..b (`replace_deltas(and_later=True)`):
  a file then holds the deltas of one run, or of compacted applied deltas, never a delta the
  snapshot applied beside one it did not, so the overwrite always drops whole files.
- `compact` rewrites only files of deltas the snapshot applied (`delta_num <= last`): an applied
  delta's history is never written again (a delta is applied once), so no later write meets a
  compacted file with rows to replace; a crashed run's history (deltas after `last`) stays in
  its own files until the re-run replaces them. One commit, or none when killed.
"""

from __future__ import annotations

from resources.spark.iceberg import _quote, _sql_str
from resources.spark.table_properties import ensure_properties

# Iceberg keeps column bounds of the first 100 columns only by default: pruning by delta_num
# (the last column) and sys_from must not depend on how wide the table is.
METRICS = {"write.metadata.metrics.column.delta_num": "full", "write.metadata.metrics.column.sys_from": "full"}


def history_partition(span: int) -> str:
    """The partition transform of a new history table holding `span` deltas per partition."""
    return "delta_num" if span == 0 else f"truncate({int(span)}, delta_num)"


def partition_fields(spark, ident: str) -> list[str]:
    """The table's partition transforms as DESCRIBE prints them: ['delta_num'], ['truncate(1000, delta_num)']."""
    rows = spark.sql(f"DESCRIBE TABLE {_quote(ident)}").collect()
    names = [str(r["col_name"]) for r in rows]
    if "# Partitioning" in names:  # transforms: "Part 0 | truncate(4, delta_num)"
        return [r["data_type"] for r in rows[names.index("# Partitioning") + 1:] if str(r["col_name"]).startswith("Part ")]
    if "# Partition Information" in names:  # identity columns only: "# col_name" then one row each
        out = []
        for name in names[names.index("# Partition Information") + 2:]:
            if not name or name.startswith("#"):
                break
            out.append(name)
        return out
    return []


_laid_out: set[tuple[str, int]] = set()  # (table, span) this process has seen laid out


def ensure_layout(spark, ident: str, span: int) -> bool:
    """Evolve the existing history table `ident` from a partition per delta to `span` deltas per
    partition (module docstring); once per table and process. True when it evolved it."""
    if span == 0 or (ident, span) in _laid_out:
        return False
    evolved = False
    if partition_fields(spark, ident) == ["delta_num"]:
        spark.sql(f"ALTER TABLE {_quote(ident)} REPLACE PARTITION FIELD delta_num WITH {history_partition(span)}")
        ensure_properties(spark, ident, METRICS)
        evolved = True
    _laid_out.add((ident, span))
    return evolved


def snapshot_of(ident: str) -> str:
    """The snapshot table beside history table `ident` (`<catalog>.<src>_history.<t>` -> `<catalog>.<src>.<t>`)."""
    catalog, namespace, table = ident.split(".")
    return f"{catalog}.{namespace.removesuffix('_history')}.{table}"


def compact(spark, ident: str, last: int, *, sort_order: str = "") -> int:
    """Rewrite the small files of the history table `ident` holding deltas up to `last` (the
    snapshot's last applied delta) into one per partition, bin-packed, or sorted by `sort_order`
    (e.g. "sys_from": files then prune by their sys_from bounds too). Returns the files rewritten."""
    catalog, rest = ident.split(".", 1)
    strategy = f", strategy => 'sort', sort_order => {_sql_str(sort_order)}" if sort_order else ""
    # Two small files of a span are worth one (Iceberg's default waits for five).
    rows = spark.sql(f"CALL `{catalog}`.system.rewrite_data_files(table => {_sql_str(rest)}{strategy}, "
                     f"where => 'delta_num <= {int(last)}', options => map('min-input-files', '2'))").collect()
    return sum(int(r["rewritten_data_files_count"] or 0) for r in rows)
