"""The key check's result in a delta run that does not scan the table (datamarts and change streams).

What flows through: the asset's key, the tables the run's MERGEs changed and the delta whose run
scans next (`resources/lake/key_check.py` `KeyCheckPlan`) -> a passing `dg.AssetCheckResult` that
says what it rests on. Shared by a datamart's `primary_key_unique` and a change stream's
`key_unique`: the premise is the same for both.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg


def key_check_not_due(key: dg.AssetKey | None, applied: Sequence, next_due: int | None, *,
                      check_name: str) -> dg.AssetCheckResult:
    """The key check of a run that does not scan: it passes on what the run's MERGEs guarantee,
    and says so. Each MERGE's source held each key once (checked in the MERGE's own job, which
    fails before its commit otherwise; a change stream's fold leaves one row per key), and such a
    MERGE onto a table whose keys are unique leaves them unique; the scans of the runs at every
    K-th delta and of maintenance check that premise."""
    return dg.AssetCheckResult(asset_key=key, check_name=check_name, passed=True, metadata={
        "keys_checked": "the run's changes only: each key once per MERGE (in the MERGE's own job)",
        "tables_merged": sorted({a.table for a in applied if a.upserts or a.deletes}),
        "next_scan_at_delta": next_due if next_due is not None else -1})
