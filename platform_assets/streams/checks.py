"""Asset checks of a change-stream source's increment and snapshot, evaluated in the materializing step.

- increment_complete: for every delta of the run, every offset of the sealed delta was read
  (none deleted by retention in the meantime) and the row changes landed for it are exactly
  those decoded, which are as many as the ledger counted when it sealed the delta.
- key_unique: no key occurs twice in any snapshot table (live rows and tombstones alike).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

import dagster as dg

from resources.lake.cdc import CdcLandStats, cdc_snapshot_as_of
from resources.lake.prostore import LakeLayout
from resources.spark.iceberg import table_exists

COMPLETE, KEY_UNIQUE = "increment_complete", "key_unique"


def increment_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(COMPLETE, asset=key,
                              description="every message of the sealed delta read; every row change landed")]


def snapshot_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(KEY_UNIQUE, asset=key, description="no key twice in any snapshot table")]


def increment_checks(landed_deltas: Sequence[tuple[object, int, Mapping[str, int], Sequence[CdcLandStats]]], *,
                     key: dg.AssetKey | None = None) -> list[dg.AssetCheckResult]:
    """The completeness check over the run's deltas [(stream slice, messages read, row changes
    decoded per table, stats)]: passes when it passes for every delta; names those that fail.
    The stats are what landed: `land_cdc_increments` counted the rows it wrote and checked each
    table's commit holds exactly those (no scan of the increment tables here). `key`: the
    increment's asset key (needed when one step has several assets)."""
    landed = {(s.delta_num, st.table): st.rows - st.before_images
              for s, _, _, stats in landed_deltas for st in stats}
    failed, totals = [], {"messages_in_ranges": 0, "messages_read": 0, "rows_sealed": 0}
    decoded_total: dict[str, int] = {}
    landed_total: dict[str, int] = {}
    for stream, read, decoded, _ in landed_deltas:
        n = stream.delta_num
        got = {t: c for (d, t), c in landed.items() if d == n and c}
        want = {t: c for t, c in decoded.items() if c}
        if not (read == stream.delta.messages and got == want and sum(want.values()) == stream.delta.rows):
            failed.append(n)
        totals["messages_in_ranges"] += stream.delta.messages
        totals["messages_read"] += read
        totals["rows_sealed"] += stream.delta.rows
        for t, c in want.items():
            decoded_total[t] = decoded_total.get(t, 0) + c
        for t, c in got.items():
            landed_total[t] = landed_total.get(t, 0) + c
    return [dg.AssetCheckResult(asset_key=key, check_name=COMPLETE, passed=not failed, metadata={
        **totals, "rows_decoded": decoded_total, "rows_landed": landed_total, "incomplete_deltas": failed})]


def snapshot_checks(spark, layout: LakeLayout, source: str, n: int, keys: Mapping[str, Sequence[str]], *,
                    asset_key: dg.AssetKey | None = None) -> tuple[dict[str, int], list[dg.AssetCheckResult]]:
    """Live rows per snapshot table as of delta n, and the key check: one job for every table
    (per key: its rows and whether it is live; then per table the live rows and the keys held by
    more than one row). `asset_key`: the snapshot's asset key."""
    from pyspark.sql import functions as F

    per_table = []
    for table, key in sorted(keys.items()):
        if not table_exists(spark, layout.snapshot(source, table)):
            continue
        df = cdc_snapshot_as_of(spark, layout, source, table, n)
        live = F.when(~F.coalesce(F.col("_tombstone"), F.lit(False)), 1).otherwise(0)
        per_key = df.groupBy(*[F.col(f"`{k}`") for k in key]).agg(F.count(F.lit(1)).alias("n"),
                                                                    F.sum(live).alias("live"))
        per_table.append((table, per_key.select(F.lit(table).alias("t"), "n", "live")))
    counts = {table: 0 for table, _ in per_table}  # an empty table has no group below
    duplicated = {}
    if per_table:
        union = reduce(lambda a, b: a.unionByName(b), [frame for _, frame in per_table])
        for r in union.groupBy("t").agg(F.sum("live").alias("live"),
                                        F.count(F.when(F.col("n") > 1, 1)).alias("dups")).collect():
            counts[r["t"]] = int(r["live"] or 0)
            if r["dups"]:
                duplicated[r["t"]] = int(r["dups"])
    return counts, [dg.AssetCheckResult(asset_key=asset_key, check_name=KEY_UNIQUE, passed=not duplicated,
                                        metadata={"duplicated_keys": duplicated})]
