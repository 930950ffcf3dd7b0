"""What every source's lake tables share, whatever the format (Prostore's datamarts and the change
streams alike): the snapshot tables' write properties, the errors that keep a delta from landing
or advancing, the check that an increment commit holds the rows written, the count of a delta's
committed rows when the write's own count was lost, and the delta filter.

What flows through: names, delta numbers and row counts; no Spark session is held here. Guarantees:
`verify_committed` raises before a manifest claims a delta whose commit lost or gained rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from resources.errors import DeltaportError

# Snapshot tables take row-level changes: merge-on-read writes the delta's changed rows and
# delete files instead of rewriting every data file a MERGE touches (copy-on-write rewrote the
# whole table for a 1% delta of random keys: `make bench`, section 3).
# Parquet row groups of 8 MB (Iceberg's default: 128 MB, a 20M-row table in 4 row groups): a
# delta of a few keys has its key list pushed into the history's and the MERGE's scans, and
# Iceberg skips each row group whose key range holds none of them; keys with locality (recent
# keys changed) then read a few row groups, not the table (`make bench`, bench/size_bench.py
# --shape locality --changes 100: 20M against 200k rows 1.97x -> 1.51x). Whole scans cost the same.
SNAPSHOT_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
    "write.parquet.row-group-size-bytes": str(8 << 20),
}


class MissingDeltasError(DeltaportError):
    """A snapshot cannot advance: earlier deltas have not landed as increments."""

    def __init__(self, source: str, target: int, missing: Sequence[int], *, kind: str = "datamart"):
        # `kind` names the source as its operator knows it: "datamart" (Prostore) or "change stream"
        self.missing = list(missing)
        super().__init__(f"{kind} {source!r}: cannot bring snapshots to delta {target}: "
                         f"increments of delta(s) {', '.join(map(str, missing))} have not landed; "
                         f"materialize them first")


def _since(frame, since: int | None):
    from pyspark.sql import functions as F

    return frame if since is None else frame.where(F.col("delta_num") >= since)


class IncrementNotLandedError(DeltaportError):
    """An increment table's commit does not hold the rows the write sent: nothing is claimed."""


def verify_committed(datamart: str, deltas: Sequence[int], written: Mapping[str, int],
                     committed: Mapping[str, int]) -> None:
    """Raise `IncrementNotLandedError` unless each table's commit added exactly the rows the write
    counted as it sent them ({ident: rows}, `written`; `committed` from the commits' summaries).
    Checked before the manifest is written, so "increment N landed" is never claimed for a
    commit that lost or gained rows; the rows are counted from the write and the commit, not by
    scanning the table again."""
    wrong = {ident: (rows, committed.get(ident)) for ident, rows in sorted(written.items())
             if committed.get(ident, 0 if rows == 0 else None) != rows}
    if wrong:
        detail = "; ".join(f"{ident}: {rows} rows written, {'no commit found' if got is None else f'{got} committed'}"
                           for ident, (rows, got) in wrong.items())
        raise IncrementNotLandedError(f"datamart {datamart!r} delta(s) {', '.join(map(str, deltas))}: "
                                      f"increment not landed as written ({detail}); the manifest was not written")


def counted_back(spark, ident: str, delta_num: int, op_column: str, ops: Mapping[str, object]) -> dict[str, int]:
    """{"rows": rows, name: rows whose `op_column` is value, for each name, value of `ops`} in delta
    `delta_num`'s partition of the increment table `ident`, as committed: what an increment write
    counts with an observation as it sends the rows, read back when that count never reached the
    client (Spark 4.1.1's client waits only 100 ms for it, SPARK-54279, which a loaded server
    misses). One aggregate over the delta's partition only."""
    from pyspark.sql import functions as F

    row = (spark.table(ident).where(F.col("delta_num") == delta_num)
           .agg(F.count(F.lit(1)).alias("rows"), *[F.count_if(F.col(op_column) == value).alias(name)
                                                   for name, value in ops.items()])
           .collect()[0])
    return {name: int(row[name] or 0) for name in ("rows", *ops)}
