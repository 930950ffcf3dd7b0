"""Reading a change stream's table back from the lake: its state as of any delta, and the row
versions Prostore's STARTED IN / FINISHED IN forms select (resources/lake/cdc.py lands them).

What flows through: a snapshot table `lake.<source>.<table>` (data columns, `_order`,
`_tombstone`, `_event_time_us`, `sys_from`, `sys_from_date`) and its history table
(resources/lake/stream_history.py) -> the state right after delta N, or the versions of a form.

Guarantees: as of N is resolved by `resources/lake/as_of.py` (`history_read.state_as_of`): the
table as it is when no delta after N changed it, the versions current at N from the two tables
where the history answers N (its `deltaport.history-from` on: no tag needed, so maintenance may
expire them), else the newest `delta_<M>` tag at or below N (a delta that left the table alone
has none), or for a delta inside a folded commit the state before the fold with the fold's
deltas up to N applied by the same rules (resources/lake/cdc_fold.py); N above the source's
landed delta is `DeltaNotLandedError`. Tombstones are not versions: no history read returns one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from resources.errors import DeltaportError
from resources.lake.cdc_columns import KEYS_PROPERTY, SNAPSHOT_COLUMNS
from resources.lake.cdc_fold import fold_changes, merged_state
from resources.lake.history_forms import FinishedIn, StartedIn
from resources.lake.history_read import LakeMark, read_mark, state_as_of, versions_frame
from resources.lake.layout import LakeLayout
from resources.lake.prostore_history import history_start
from resources.lake.stream_history import LIVE
from resources.spark.iceberg import _col as _q
from resources.spark.iceberg import table_exists
from resources.spark.session_properties import recorded_property
from resources.spark.iceberg_reads import InsideFold, folded_commits, last_applied_deltas


def cdc_recorded_deltas(spark, ident: str, *, mark: LakeMark | None = None) -> set[int]:
    """The deltas a snapshot table answers as of: every delta from its first recorded one (its
    oldest tag, fold or history start: maintenance keeps the tags below the history's start) to
    the source's landed delta L, whether it changed the table or left it alone (no tag then).
    Empty when the table records no delta. `mark`: the source's lake mark, when the caller has
    read it (a lake without one: L is the table's own newest recorded delta)."""
    tags: dict[str, dict[int, int]] = {}
    recorded = last_applied_deltas(spark, [ident], tags=tags).get(ident)
    if recorded is None:
        return set()
    start = history_start(spark, ident)
    firsts = [*tags[ident], *(c.deltas[0] for c in folded_commits(spark, ident)), *([start] if start is not None else [])]
    if mark is None:
        _, source, _ = ident.split(".", 2)
        mark = read_mark(spark, LakeLayout(ident.split(".", 1)[0]), source)
    landed = mark.landed(recorded)
    return set(range(min(firsts, default=recorded), landed + 1))


def cdc_snapshot_as_of(spark, layout: LakeLayout, source: str, table: str, delta_num: int, *,
                       last: int | None = None, mark: LakeMark | None = None):
    """The snapshot table (data columns, `_order`, `_tombstone`, `_event_time_us`) as it was
    right after delta `delta_num` (module docstring: from the history where it answers N, with
    `sys_from` and `sys_from_date` then and no tombstone; else as it is, by tag or fold; empty
    when the table had no rows then). Raises `DeltaNotLandedError` for N above the source's
    landed delta. `last`, `mark`: as `state_as_of` takes them."""
    from pyspark.sql import functions as F

    state = state_as_of(spark, layout, source, table, delta_num, current_filter=LIVE, last=last, mark=mark)
    if not isinstance(state, InsideFold):
        return state
    fold, schema, base = state.fold, state.schema, state.base
    types = {f.name: f.dataType for f in schema.fields}
    keys = json.loads(recorded_property(fold.summary, KEYS_PROPERTY, layout.snapshot(source, table)))
    data = [f.name for f in schema.fields if f.name not in SNAPSHOT_COLUMNS]
    changes = spark.table(layout.increment(source, table)).where(
        F.col("delta_num").between(fold.deltas[0], delta_num))
    folded = fold_changes(changes, base, keys, data, types, several_deltas=True)
    return merged_state(base, folded, keys, data)


def cdc_columns_as_of(spark, layout: LakeLayout, source: str, table: str, delta_num: int
                      ) -> tuple[list[str], list[dict]]:
    """(data column names in table order, live rows) of the table right after delta `delta_num`."""
    require_table(spark, layout, source, table)
    names = [c for c in cdc_snapshot_as_of(spark, layout, source, table, delta_num).columns
             if c not in SNAPSHOT_COLUMNS]
    return names, cdc_rows_as_of(spark, layout, source, table, delta_num)


def cdc_rows_as_of(spark, layout: LakeLayout, source: str, table: str, delta_num: int, *,
                   mark: LakeMark | None = None) -> list[dict]:
    """The table's live rows right after delta `delta_num` (tombstones and the lake's `_`
    columns left out), data columns in table order, binary as bytes, sorted by their values.
    `mark`: the source's lake mark, when the caller has read it."""
    names, live = cdc_live_frame(spark, layout, source, table, delta_num, mark=mark)
    return _sorted([_plain(dict(zip(names, r))) for r in live.collect()], names)


def cdc_live_frame(spark, layout: LakeLayout, source: str, table: str, delta_num: int, *,
                   last: int | None = None, mark: LakeMark | None = None):
    """(data column names in table order, a DataFrame of the table's live rows right after delta
    `delta_num` in those columns, unsorted). `last`, `mark`: as `state_as_of` takes them."""
    from pyspark.sql import functions as F

    df = cdc_snapshot_as_of(spark, layout, source, table, delta_num, last=last, mark=mark)
    names = [c for c in df.columns if c not in SNAPSHOT_COLUMNS]
    return names, df.where(~F.coalesce(F.col("_tombstone"), F.lit(False))).select(*[_q(n) for n in names])


def cdc_versions_in(spark, layout: LakeLayout, source: str, table: str, form: StartedIn | FinishedIn, *,
                    last: int) -> tuple[list[str], list[dict]]:
    """(data column names in table order, versions) that STARTED IN / FINISHED IN `form`
    selects, each with `sys_from`, `sys_to`, `sys_op`, sorted by their values then `sys_from`.
    `last`: the table's last applied delta. Raises `HistoryNotKeptError` when its history does
    not answer the form."""
    names, df = cdc_versions_frame(spark, layout, source, table, form, last=last)
    rows = [_plain(r.asDict()) for r in df.collect()]
    return names, _sorted(rows, [*names, "sys_from", "sys_to"])


def cdc_versions_frame(spark, layout: LakeLayout, source: str, table: str, form: StartedIn | FinishedIn, *,
                       last: int):
    """(data column names in table order, a DataFrame of the versions `cdc_versions_in` gives, unsorted)."""
    require_table(spark, layout, source, table)
    names = [f.name for f in spark.table(layout.snapshot(source, table)).schema.fields if f.name not in SNAPSHOT_COLUMNS]
    return names, versions_frame(spark, layout, source, table, form, names, last=last, current_filter=LIVE)


def require_table(spark, layout: LakeLayout, source: str, table: str) -> None:
    ident = layout.snapshot(source, table)
    if not table_exists(spark, ident):
        raise DeltaportError(f"{ident} does not exist (no change of {source}.{table} has landed)")


def _plain(row: dict) -> dict:
    return {n: bytes(v) if isinstance(v, bytearray) else v for n, v in row.items()}


def _sorted(rows: list[dict], order: Sequence[str]) -> list[dict]:
    return sorted(rows, key=lambda row: [(row[c] is not None, repr(row[c])) for c in order])
