"""What a `@delta_asset` reads and how its rows are written (platform_assets/build_on.py).

`DeltaView`: one source's tables as of one delta, as Spark DataFrames with data columns only
and live rows only. Each is read the way `deltaport read --as-of-delta` reads it
(`history_read.state_as_of`, `resources/lake/as_of.py`): a table the delta left alone has no tag
of it and is read as it was after the last delta that changed it; a delta inside a folded range
is the state before the fold plus the increments. So a user asset sees exactly the state the
checks and the oracle compare. The source's lake mark (its landed delta) is read once for a
run's views. TIME
columns of a datamart hold microseconds since midnight, as in the snapshot tables.

`write_mart`: the rows of every delta of a run in one Iceberg commit, replacing exactly those
deltas' rows (`replace_deltas`). A crash before the commit leaves the old rows; a re-run writes
the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.lake.cdc import SNAPSHOT_COLUMNS, cdc_snapshot_as_of
from resources.lake.history_read import LakeMark, read_mark
from resources.lake.layout import LakeLayout
from resources.lake.prostore import changelog_history, data_tables
from resources.lake.prostore_snapshot import snapshot_as_of
from resources.lake.read import UnknownTableError
from resources.lake.stream_keys import snapshot_tables
from resources.spark.iceberg import committed_records, ensure_table, replace_deltas


@dataclass(frozen=True)
class DeltaView:
    """The tables of `source` right after delta `delta`."""

    spark: Any
    layout: LakeLayout
    source: str
    delta: int
    kind: str  # "prostore" | "stream"
    entities: Mapping[str, EntitySchema] = field(default_factory=dict)  # prostore: the DDL as of `delta`
    stream_tables: Sequence[str] = ()
    mark: LakeMark | None = None  # the source's lake mark, read once for all the views of a run

    @classmethod
    def for_deltas(cls, spark, catalog: str, source: str, kind: str, deltas: Sequence[int]) -> list[DeltaView]:
        """One view per delta; the datamart's changelog is read once for all of them."""
        layout = LakeLayout(catalog)
        mark = read_mark(spark, layout, source)
        if kind != "prostore":
            names = tuple(snapshot_tables(spark, layout, source))
            return [cls(spark, layout, source, n, kind, stream_tables=names, mark=mark) for n in deltas]
        history = changelog_history(spark, layout, source)
        views = []
        for n in deltas:
            landed = [d for d in history if d <= n]
            entities = data_tables(replay_changelog(history[max(landed)])) if landed else {}
            views.append(cls(spark, layout, source, n, kind, entities=entities, mark=mark))
        return views

    def tables(self) -> list[str]:
        return sorted(self.entities) if self.kind == "prostore" else list(self.stream_tables)

    def table(self, name: str):
        """The table `name` as of this delta: a Spark DataFrame of its data columns, live rows."""
        from pyspark.sql import functions as F

        if name not in self.tables():
            raise UnknownTableError(f"{self.source}.{name} is not a table as of delta {self.delta}; "
                                    f"tables: {', '.join(self.tables()) or 'none'}")
        if self.kind == "prostore":
            entity = self.entities[name]
            df = snapshot_as_of(self.spark, self.layout, self.source, name, self.delta, entity.primary_key,
                                mark=self.mark)
            return df.select(*[F.col(f"`{c.name}`") for c in entity.columns])
        df = cdc_snapshot_as_of(self.spark, self.layout, self.source, name, self.delta, mark=self.mark)
        live = df.where(~F.coalesce(F.col("_tombstone"), F.lit(False)))
        return live.select(*[F.col(f"`{c}`") for c in df.columns if c not in SNAPSHOT_COLUMNS])


def write_mart(spark, ident: str, frames: Sequence[tuple[int, Any]], *, live: dict[str, int] | None = None) -> int:
    """Write each (delta, DataFrame) as that delta's rows of `ident`, in one commit; the rows added.
    `live`, if given, gets the table's rows after the commit, from the same summary query."""
    from pyspark.sql import functions as F

    parts = [frame.withColumn("delta_num", F.lit(n).cast("int")) for n, frame in frames]
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part, allowMissingColumns=True)
    ensure_table(spark, ident, rows.schema, partition_by=["delta_num"])
    commit = replace_deltas(spark, ident, rows, [n for n, _ in frames])
    return committed_records(spark, {ident: commit}, live=live).get(ident, 0)


def mart_rows_by_delta(spark, ident: str, deltas: Sequence[int]) -> dict[int, int]:
    """{delta: its rows in `ident`} of a range just written: one grouped count of those deltas'
    partitions (the table is partitioned by delta_num), so it reads what the run wrote, no more."""
    listed = ", ".join(str(int(n)) for n in deltas)
    counted = spark.sql(f"SELECT delta_num, count(*) AS n FROM {ident} WHERE delta_num IN ({listed}) "
                        "GROUP BY delta_num").collect()
    found = {int(r["delta_num"]): int(r["n"]) for r in counted}
    return {n: found.get(n, 0) for n in deltas}
