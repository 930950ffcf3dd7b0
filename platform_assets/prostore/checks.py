"""Asset checks of a datamart's increment and snapshot, evaluated in the materializing step.

- increment_complete: the delta's chosen export run is complete (every stream, no hole) and the
  increment tables hold, for delta N, exactly the rows read from Kafka (counted as the write
  sent them and checked against each commit's added rows by `land_increments`, which fails the
  step before the manifest when they differ: no scan of the tables again).
- rows_reconciled_with_write_ok: per table, the increment's rows equal the sum of rowsAffected
  of the WRITE_OK events that fed it (those of the delta, and writes outside any delta since the
  previous close). WRITE_* events can be switched off in Prostore: then the check passes and
  says it had nothing to compare.
- schema_matches_changelog: every increment table has every DDL column with the DDL's type.
- no_quarantined_messages (WARN): no backup message of the delta was quarantined (a corrupt
  copy, a chunk its changelog refuses). Bad input that was handled: the delta landed from its good
  copies, nothing was lost, so it warns rather than fails; it names each message's topic,
  partition and offset, as the index keeps them (`DeltaIndex.delta_quarantine`).
- primary_key_unique: no primary key occurs twice in any snapshot table (checked at the keys the
  run changed: `resources/lake/key_check.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import dagster as dg

from resources.codecs.ddl import replay_changelog
from resources.codecs.types import spark_type
from resources.prostore.delta_index import DeltaIndex
from resources.lake.layout import LakeLayout
from resources.lake.prostore import TableStats, changelog_history, data_tables
from resources.lake.key_check import KeyCheckInput, commit_deltas, key_check
from resources.spark.iceberg import _ranges_text, table_exists

COMPLETE, RECONCILED, SCHEMA, PK_UNIQUE, QUARANTINE = (
    "increment_complete", "rows_reconciled_with_write_ok", "schema_matches_changelog", "primary_key_unique",
    "no_quarantined_messages")
MAX_NAMED = 20  # bad messages named in the check's description and metadata


def increment_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(COMPLETE, asset=key, description="chosen export complete; every row read landed"),
        dg.AssetCheckSpec(RECONCILED, asset=key, description="rows per table = WRITE_OK rowsAffected, where present"),
        dg.AssetCheckSpec(SCHEMA, asset=key, description="increment tables carry the changelog's DDL schema"),
        dg.AssetCheckSpec(QUARANTINE, asset=key, description="no message of the delta quarantined (warns: handled "
                                                             "bad input, its good copies landed)"),
    ]


def snapshot_check_specs(key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(PK_UNIQUE, asset=key, description="no primary key twice in any snapshot table")]


def increment_checks(spark, layout: LakeLayout, dm: str, landed_deltas: list[tuple[object, dict, list[TableStats]]],
                     index: DeltaIndex, *, key: dg.AssetKey | None = None,
                     unchanged: Collection[str] = ()) -> list[dg.AssetCheckResult]:
    """The increment's checks over the run's deltas [(backup slice, entities, stats)]: each
    check passes when it passes for every delta; its metadata names the deltas that fail.
    `stats`: the rows each delta's tables landed, as `land_increments` verified them against
    the commits. `key`: the increment's asset key (needed when one step has several assets).
    `unchanged`: tables whose increment table the run left as the delta before it had it, with
    the same DDL (`unchanged_increment_tables`): their schema is not read again (a round trip
    per table: the run checks what it wrote, not the datamart's width; issue 57)."""
    rows_total: dict[str, int] = {}
    incomplete, unreconciled, compared = [], {}, False
    for backup, _, stats in landed_deltas:
        n = backup.delta_num
        read = {s.table: s.rows for s in stats}
        for t in read:
            rows_total[t] = rows_total.get(t, 0) + read[t]
        if not backup.report.complete:
            incomplete.append(n)
        # A snapshot's delta 0 holds a state, not the delta's changes: nothing to reconcile.
        writes = None if backup.snapshot_state else index.writes_for_increment(dm, n)
        if writes is not None:
            compared = True
            mine = {t: c for t, c in read.items() if c}
            theirs = {_bare(t): c for t, c in writes.items() if c}
            if mine != theirs:
                unreconciled[str(n)] = {"increment_rows": mine, "rows_affected": theirs}
    last = landed_deltas[-1][0]
    complete = dg.AssetCheckResult(
        asset_key=key, check_name=COMPLETE, passed=not incomplete,
        metadata={"increment_id": last.report.chosen or "", "rows_read": rows_total, "rows_landed": rows_total,
                  "incomplete_deltas": incomplete})
    if not compared:
        reconciled = dg.AssetCheckResult(asset_key=key, check_name=RECONCILED, passed=True,
                                         metadata={"compared": False, "why": "no WRITE_OK events for these deltas"})
    else:
        reconciled = dg.AssetCheckResult(asset_key=key, check_name=RECONCILED, passed=not unreconciled,
                                         severity=dg.AssetCheckSeverity.WARN,
                                         metadata={"compared": True, "mismatches": unreconciled})

    latest = {}  # each table as its newest DDL in the run describes it
    for _, entities, _ in landed_deltas:
        latest.update(data_tables(entities))
    problems = []
    for name, entity in sorted(latest.items()):
        if name in unchanged:
            continue
        ident = layout.increment(dm, name)
        have = {f.name.lower(): f.dataType for f in spark.table(ident).schema.fields}
        for col in entity.columns:
            if have.get(col.name.lower()) != spark_type(col):
                problems.append(f"{name}.{col.name}: lake {have.get(col.name.lower())}, DDL {spark_type(col)}")
    schema = dg.AssetCheckResult(asset_key=key, check_name=SCHEMA, passed=not problems,
                                 metadata={"problems": problems, "tables_checked": len(set(latest) - set(unchanged))})
    return [complete, reconciled, schema]


def quarantine_check(topic: str, bad: dict[int, list[dict]], *, key: dg.AssetKey | None = None
                     ) -> dg.AssetCheckResult:
    """`no_quarantined_messages` over the run's deltas: `bad` is {delta: its quarantined messages}
    (`DeltaIndex.delta_quarantine`); fails with severity WARN, naming each (topic, partition,
    offset, kind), when any delta has one."""
    named = [{"delta": n, "topic": topic, "partition": q["partition"], "offset": q["offset"], "kind": q["kind"],
              "part": q["part"] or "", "reason": q["reason"][:200]} for n, qs in sorted(bad.items()) for q in qs]
    text = "; ".join(f"delta {q['delta']}: {q['kind']} at topic {topic!r} partition {q['partition']} offset "
                     f"{q['offset']}" for q in named[:MAX_NAMED])
    return dg.AssetCheckResult(
        asset_key=key, check_name=QUARANTINE, passed=not named, severity=dg.AssetCheckSeverity.WARN,
        description=(text + (f"; and {len(named) - MAX_NAMED} more" if len(named) > MAX_NAMED else "")) or None,
        metadata={"bad_messages": len(named), "quarantined": named[:MAX_NAMED]})


def _bare(entity: str) -> str:
    """WRITE_OK may name the entity with its datamart (marketing.sales): compare bare names."""
    return entity.rsplit(".", 1)[-1]


def snapshot_checks(spark, layout: LakeLayout, dm: str, n: int, history=None, *,
                    key: dg.AssetKey | None = None, deltas: Sequence[int] | None = None,
                    every_key: bool = False,
                    new: Collection[str] = ()) -> tuple[dict[str, int], list[dg.AssetCheckResult]]:
    """Rows per snapshot table as of delta n, and the primary-key check: one job for every
    table (`history`: the datamart's changelog history when the caller has it already; `key`:
    the snapshot's asset key).

    The check looks at the keys of the increments of `deltas` (`resources/lake/key_check.py`
    says why that is exact for rows the deltas wrote); by default those that each table's
    commit of delta n applied (one delta, or a fold's range), so what it shuffles is O(delta),
    not O(table). `every_key`: every key of every table instead, O(table) shuffled, which also
    catches a key that some other writer put twice (maintenance runs this one).

    `new`, with `deltas`: tables with no delta recorded before the run (made by it), whose every
    row is one the run's deltas (among `deltas`) wrote: their keys are all those deltas' keys, so
    every key of theirs is checked as it is, with no scan of their increment and no join (every
    table of a datamart's first delta)."""
    from pyspark.sql import functions as F

    history = changelog_history(spark, layout, dm) if history is None else history
    entities = data_tables(replay_changelog(history.get(n, [])))
    frames, checked = [], {}
    for name, entity in sorted(entities.items()):
        ident = layout.snapshot(dm, name)
        if table_exists(spark, ident):
            touched = None
            if not every_key:
                run = sorted(deltas) if deltas is not None else commit_deltas(spark, ident, n)
                checked[name] = _ranges_text(run)
                if name not in new or deltas is None:
                    touched = spark.table(layout.increment(dm, name)).where(F.col("delta_num").isin(run))
            frames.append(KeyCheckInput(name, spark.table(ident), touched, entity.primary_key))
    named: dict[str, list[str]] = {}
    counts, duplicated = key_check(frames, named=named)
    scope = {"keys_checked": "every key"} if every_key else {"keys_of_deltas": checked}
    return counts, [dg.AssetCheckResult(asset_key=key, check_name=PK_UNIQUE, passed=not duplicated,
                                        description=_duplicates_text(dm, duplicated, named) or None,
                                        metadata={"duplicated_keys": duplicated, "named_keys": named, **scope})]


def _duplicates_text(dm: str, duplicated: dict[str, int], named: dict[str, list[str]]) -> str:
    """One line per table holding a key twice: its name, how many keys, and the first of them."""
    return "; ".join(f"{dm}.{t}: {c} key(s) held by more than one row, e.g. ({'), ('.join(named.get(t, []))})"
                     for t, c in sorted(duplicated.items()))
