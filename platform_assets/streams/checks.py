"""Asset checks of a change-stream source's increment and snapshot, evaluated in the materializing step.

- increment_complete: every offset of the sealed delta was read (none deleted by retention in
  the meantime) and the row changes landed for delta N are exactly those decoded, which are as
  many as the ledger counted when it sealed the delta.
- key_unique: no key occurs twice in any snapshot table (live rows and tombstones alike).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from resources.lake.cdc import CdcLandStats
from resources.lake.prostore import LakeLayout
from resources.spark.iceberg import read_as_of_delta, table_exists

COMPLETE, KEY_UNIQUE = "increment_complete", "key_unique"


def increment_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(COMPLETE, asset=key,
                              description="every message of the sealed delta read; every row change landed")]


def snapshot_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(KEY_UNIQUE, asset=key, description="no key twice in any snapshot table")]


def increment_checks(spark, layout: LakeLayout, source: str, stream, read: int, decoded: Mapping[str, int],
                     stats: Sequence[CdcLandStats]) -> list[dg.AssetCheckResult]:
    from pyspark.sql import functions as F

    n = stream.delta_num
    landed = {s.table: spark.table(layout.increment(source, s.table))
              .where((F.col("delta_num") == n) & (F.col("_op") != "before_image")).count() for s in stats}
    landed = {t: c for t, c in landed.items() if c}
    want = {t: c for t, c in decoded.items() if c}
    in_ranges = stream.delta.messages
    passed = read == in_ranges and landed == want and sum(want.values()) == stream.delta.rows
    return [dg.AssetCheckResult(check_name=COMPLETE, passed=passed, metadata={
        "messages_in_ranges": in_ranges, "messages_read": read, "rows_sealed": stream.delta.rows,
        "rows_decoded": want, "rows_landed": landed})]


def snapshot_checks(spark, layout: LakeLayout, source: str, n: int, keys: Mapping[str, Sequence[str]]
                    ) -> tuple[dict[str, int], list[dg.AssetCheckResult]]:
    """Live rows per snapshot table as of delta n, and the key check."""
    from pyspark.sql import functions as F

    counts, duplicated = {}, {}
    for table, key in sorted(keys.items()):
        ident = layout.snapshot(source, table)
        if not table_exists(spark, ident):
            continue
        df = read_as_of_delta(spark, ident, n)
        counts[table] = df.where(~F.coalesce(F.col("_tombstone"), F.lit(False))).count()
        dups = df.groupBy(*[F.col(f"`{k}`") for k in key]).count().where("count > 1").count()
        if dups:
            duplicated[table] = dups
    return counts, [dg.AssetCheckResult(check_name=KEY_UNIQUE, passed=not duplicated,
                                        metadata={"duplicated_keys": duplicated})]
