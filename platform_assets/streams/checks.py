"""Asset checks of a change-stream source's increment and snapshot, evaluated in the materializing step.

- increment_complete: for every delta of the run, every offset of the sealed delta was read
  (none deleted by retention in the meantime) and the row changes landed for it are exactly
  those decoded, which are as many as the ledger counted when it sealed the delta.
- key_unique: no key occurs twice in any snapshot table (live rows and tombstones alike; NULL is a
  key value): checked at the keys of the deltas since the last check, O(delta) (`snapshot_checks`),
  in one run in `lake.key_check_every_deltas` (`KeyCheckPlan`), and at every key in a run that
  maintains the tables. The other runs scan nothing: their check passes on what the fold and
  the MERGE guarantee (one row per key), and their rows per table come from the commits'
  summaries less the tombstones each commit records (`resources/lake/cdc.py` `_apply`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dagster as dg

from resources.lake.cdc import CdcLandStats, cdc_snapshot_as_of
from resources.lake.history_read import LakeMark
from resources.lake.key_check import KeyCheckInput, key_check
from resources.lake.layout import LakeLayout
from resources.lake.stream_keys import keys_before
from resources.spark.iceberg import _ranges_text, table_exists

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
                    asset_key: dg.AssetKey | None = None, deltas: Mapping[str, Sequence[int]] | None = None,
                    ) -> tuple[dict[str, int], list[dg.AssetCheckResult]]:
    """Live rows per snapshot table as of delta n, and the key check, in one job for every table
    (`resources/lake/key_check.py`). `asset_key`: the snapshot's asset key.

    `deltas`: {table: the deltas the run applied to it}. A table's check then looks at the keys
    of those deltas' increments only (O(delta) shuffled, exact by the induction key_check.py
    gives), unless its key columns changed since its commit before the run (or that commit does
    not say): every key is checked then. A table not in `deltas`, or without it, is checked whole."""
    from pyspark.sql import functions as F

    present = {t: k for t, k in sorted(keys.items()) if table_exists(spark, layout.snapshot(source, t))}
    # The run has committed every table through n (those n left alone have no commit for it), and
    # the lake's mark moves to n only after these checks: as of n is landed for this read.
    landed = LakeMark(int(n))
    runs = {t: sorted(deltas[t]) for t in present if deltas is not None and deltas.get(t)}
    before = keys_before(spark, {layout.snapshot(source, t): run[0] for t, run in runs.items()})
    frames, checked = [], {}
    for table, key in present.items():
        run = runs.get(table)
        same_key = run is not None and before.get(layout.snapshot(source, table)) == tuple(key)
        touched = None
        if same_key:
            checked[table] = _ranges_text(run)
            touched = spark.table(layout.increment(source, table)).where(F.col("delta_num").isin(run))
        live = F.when(~F.coalesce(F.col("_tombstone"), F.lit(False)), 1).otherwise(0)
        frames.append(KeyCheckInput(table, cdc_snapshot_as_of(spark, layout, source, table, n, mark=landed), touched,
                                    list(key), null_safe=True, live=live))
    counts, duplicated = key_check(frames)
    return counts, [dg.AssetCheckResult(asset_key=asset_key, check_name=KEY_UNIQUE, passed=not duplicated,
                                        metadata={"duplicated_keys": duplicated, "keys_of_deltas": checked})]
