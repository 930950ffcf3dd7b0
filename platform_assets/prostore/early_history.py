"""A steady delta's history write, started beside the manifest's commit instead of after it.

What flows through: a one-delta run's landed increment (its tables' stats, the rows are in the
increment tables) and what the snapshot read of the lake before the run (each table's last
applied delta, the changelog history); out, the versions the delta closes, written to each
history table (`resources/lake/prostore_history.py` `write_closed_versions`), and the tables
whose history is done, which the snapshot's MERGEs then do not write again, each with the MERGE's
key filter worked out for its read (the MERGE uses it as it is).

Why: the history write is a job of its own (the snapshot table joined with the delta's keys)
and sat on the snapshot's critical path between the manifest and the MERGE. It needs only the
increment's rows and the snapshot table as it was before the run, both there once the increment
tables have committed; the manifest's commit, the increment's check of its commits and the
snapshot's reads of the lake go on meanwhile.

Guarantees, as prostore_history's: the history partition of delta N is written before N's
MERGE (here before phase 2 even starts), from a pre-state no MERGE has touched (the table's last
applied delta is N-1, read by this run, which holds the datamart); a crash between the two
leaves a history partition that readers bound by the snapshot's last applied delta, and the
re-run writes it again. Only the plain case goes early: one delta, a table it changes whose
columns and key are those of the delta before (no column change to carry over, no table
created again), history kept. Anything else, or an early write that failed, is written by the
snapshot's own path as before (`prostore_snapshot._apply_delta`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from resources.codecs.ddl import column_transition, replay_changelog
from resources.lake.layout import LakeLayout
from resources.lake.prostore import TableStats, _table_columns, data_tables
from resources.lake.prostore_history import mark_history_start, stamped, write_closed_versions
from resources.lake.side_by_side import side_by_side
from resources.spark.iceberg_merge import KeyFilter, narrow_to_changed_keys


def early_history_tables(layout: LakeLayout, datamart: str, delta: int, records: Sequence,
                         progress: Mapping[str, int | None], history: Mapping[int, list],
                         stats: Sequence[TableStats]) -> dict[str, object]:
    """{table: its entity} of delta `delta`'s tables whose history may be written early
    (module docstring): changed by the delta, last applied delta `delta - 1`, the same columns
    and key in both deltas' changelogs."""
    if delta - 1 not in history:
        return {}
    now = data_tables(replay_changelog(records))
    before = data_tables(replay_changelog(history[delta - 1]))
    out = {}
    for s in stats:
        entity, prev = now.get(s.table), before.get(s.table)
        if (s.rows and entity is not None and prev is not None
                and progress.get(layout.snapshot(datamart, s.table)) == delta - 1
                and prev.columns == entity.columns and prev.primary_key == entity.primary_key
                and column_transition(prev, entity).unchanged):
            out[s.table] = entity
    return out


def write_early_history(spark, layout: LakeLayout, datamart: str, delta: int, tables: Mapping[str, object],
                        stats: Sequence[TableStats], sizes: Mapping[str, int] | None = None) -> dict[str, KeyFilter]:
    """Write delta `delta`'s closed versions of `tables` (`early_history_tables`), side by side;
    {table written: the MERGE's key filter for it}. A table whose columns in the lake are not
    exactly its DDL's (the snapshot's step would change them first) is left to that step.
    `sizes`: {snapshot ident: live rows} as the run read them (weighs the key filter)."""
    rows = {s.table: s.rows for s in stats}

    def one(name: str, entity) -> tuple[str, KeyFilter] | None:
        from pyspark.sql import functions as F

        ident = layout.snapshot(datamart, name)
        table = spark.table(ident)
        schema = table.schema
        have = {f.name.lower() for f in schema.fields}
        if any(c.name.lower() not in have for c in entity.columns):
            return None
        mark_history_start(spark, ident, delta, True)
        changes = (spark.table(layout.increment(datamart, name)).where(F.col("delta_num") == delta)
                   .drop("_kafka_partition", "_kafka_offset"))
        changes = _table_columns(stamped(changes), schema, extra=["sys_op", "delta_num", "delta_date"])
        keys = list(entity.primary_key)
        narrowed = narrow_to_changed_keys(spark, ident, changes.select(*keys), keys, rows=rows.get(name),
                                          target_size=(sizes or {}).get(ident))
        write_closed_versions(spark, layout, datamart, name, table, schema, changes, keys, [delta], rows=rows.get(name),
                              key_filter=narrowed.text if narrowed.prunes else None)
        return name, narrowed

    return dict(n for n in side_by_side(one, sorted(tables.items())) if n is not None)
