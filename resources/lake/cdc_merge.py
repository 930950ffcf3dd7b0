"""A change stream's folded changes MERGEd into its snapshot table (`resources/lake/cdc.py` folds
them, `cdc_fold.fold_changes`; this applies them).

What flows through: per key, the newest applied change of a run's deltas (`_order`, `_op`, the
captured values and whether each column was captured, the version's `sys_from`), into one MERGE
of the snapshot table. Guarantees: one commit recording the run's last delta (with several
deltas, the run too), and the table's key columns and tombstones after it under keys of the
table's own (`session_properties.own_property`), tagged `delta_<last>`; a change older than the
stored row's `_order` changes nothing, so a re-run or a late change never rolls a row back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from resources.codecs.cdc import DELETE
from resources.lake.cdc_columns import KEYS_PROPERTY
from resources.lake.stream_history import VERSION_SET, VERSION_VALUES
# The MERGE's commit, summary and tag are iceberg_merge's (`merge_and_tag`): the session-wide
# snapshot-property block is process-wide, shared, not copied (a second lock would not serialise).
from resources.spark.iceberg import DELTAS_PROPERTY, DeltaCommit, _quote, _ranges_text, _sql_str
from resources.spark.iceberg import _col as _q
from resources.spark.iceberg_merge import merge_and_tag, narrow_to_changed_keys
from resources.spark.iceberg_reads import TOMBSTONES_PROPERTY


def merge_folded(spark, ident: str, folded, keys: list[str], data: list[str], deltas: Sequence[int],
           commit_id: str, *, changes_rows: int | None = None, tombstones: int,
           key_filter: str | None = None) -> DeltaCommit:
    """MERGE the `fold_changes` of `deltas` (consecutive) into the snapshot: one commit recording
    the last delta, the key columns and the table's `tombstones` after it, with several deltas
    the whole run too (for `cdc_snapshot_as_of`), tagged `delta_<last>`. `key_filter`: the
    target's filter to the changes' keys when the caller worked it out already (the changes'
    keys are the folded ones, or more: a wider filter changes no match)."""
    delta_num = deltas[-1]
    # Every commit records its key columns: a fold's readers need them, and the next run reads a
    # table's current key from its newest commit instead of the whole changelog (stream_keys.py).
    # Keyed by the table (session_properties.py): the MERGEs of a run's other tables, with
    # other keys and tombstones, run beside this one instead of waiting for it.
    own = {KEYS_PROPERTY: json.dumps(list(keys)), TOMBSTONES_PROPERTY: str(int(tombstones))}
    extra = {DELTAS_PROPERTY: _ranges_text(deltas)} if len(deltas) > 1 else {}
    index = {c: i for i, c in enumerate(data)}
    on = " AND ".join(f"t.{_q(k)} <=> s.{_q(k)}" for k in keys)
    # The target's rows of other keys dropped as they are scanned, not shuffled (merge_keys.py).
    # `changes_rows` (the folded keys): a target too small for the list to pay gets none.
    narrowed = key_filter or narrow_to_changed_keys(spark, ident, folded.select(*[_q(k) for k in keys]), keys,
                                                    rows=changes_rows, null_safe=True).text
    if narrowed:
        on = f"{on} AND {narrowed}"
    non_key = [c for c in data if c not in keys]
    deleted = ", ".join([*(f"t.{_q(c)} = NULL" for c in non_key),
                         "t._order = s._order", "t._tombstone = true", "t._event_time_us = s._event_time_us",
                         *VERSION_SET])
    # A column the delta did not capture keeps the stored value, unless the delta deleted the key
    # first (_reset) or the stored row is a tombstone: then the row starts empty.
    updated = ", ".join([*(f"t.{_q(c)} = CASE WHEN s.__dp_c{index[c]} THEN s.__dp_v{index[c]} "
                           f"WHEN s.__dp_reset OR t._tombstone THEN NULL ELSE t.{_q(c)} END" for c in non_key),
                         "t._order = s._order", "t._tombstone = false", "t._event_time_us = s._event_time_us",
                         *VERSION_SET])
    cols = ", ".join([*(_q(c) for c in data), "_order", "_tombstone", "_event_time_us", *(c for c, _ in VERSION_VALUES)])
    vals = ", ".join([*(f"s.{_q(c)}" if c in keys else f"s.__dp_v{index[c]}" for c in data),
                      "s._order", f"s._op = {_sql_str(DELETE)}", "s._event_time_us", *(v for _, v in VERSION_VALUES)])
    return merge_and_tag(spark, ident, folded, lambda view: (
        f"MERGE INTO {_quote(ident)} AS t USING `{view}` AS s ON {on} "
        f"WHEN MATCHED AND s._order > t._order AND s._op = {_sql_str(DELETE)} THEN UPDATE SET {deleted} "
        f"WHEN MATCHED AND s._order > t._order THEN UPDATE SET {updated} "
        f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({vals})"), delta_num=delta_num, commit_id=commit_id, extra=extra, own=own)
