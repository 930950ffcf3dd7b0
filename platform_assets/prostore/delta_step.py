"""The one step that lands a run's deltas of a Prostore datamart: the work behind its four assets
(signal_events, changelog, increment, snapshot), declared together as one multi-asset.

Why one step: the assets' work is mostly waiting on the Spark server (planning, commits,
metadata reads), and as four steps in a row a delta paid every wait in turn, and the snapshot
read back from the lake what the steps before it had just written. Here:
1. side by side: signal_events' commit; changelog's commit; the increment tables' commits and,
   once they and the changelog's commit are done, the manifest's; the snapshot's reads of
   the lake as it was before the run (manifest, changelog history, each table's last delta;
   the manifest and changelog read once, for the increment's side too: `MetaRead`);
   and, in a one-delta run, once the increment tables and those reads are done, the history
   of the tables the delta changes (`early_history.py`), beside the manifest's commit;
2. once changelog and increment have landed: the snapshot's MERGEs beside the increment's
   schema check, then the snapshot's checks. The snapshot takes the run's manifest rows and
   changelogs from memory, merged over what phase 1 read: nothing it needs is read twice.
   Phase 1's materializations are reported (written to Dagster's event log) while phase 2
   works, not before it starts.

The assets' guarantees are those they had as four steps: "increment N landed" (the manifest
row) is written only after the increment tables and the changelog of N; the snapshot runs only
after that, and applies what the manifest records. A failed signal_events does not stop the
others (the snapshot never needed it): the step fails at its end, naming every asset that
failed; what landed is reported as materialized. A subset (one asset from the UI, a backfill
of the snapshot alone) does what those assets did as steps of their own: an unselected asset
is not written, and what the snapshot needs of it comes from the lake.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import dagster as dg

from platform_assets.delta_metadata import changed_tables, per_delta_metadata, tables_entry
from platform_assets.history_asset import history_reported, refuse_history_alone
from platform_assets.key_check_skipped import key_check_not_due
from platform_assets.lake_tables import Tables
from platform_assets.prostore import checks
from platform_assets.prostore.early_history import early_history_tables, write_early_history
from platform_assets.deltas.partitions import delta_span
from platform_assets.prostore.signal_rows import signal_frame
from platform_assets.step_outcomes import ChangelogNotLandedError, Outcome, step_failure, timed
from resources.codecs.backup import iter_changelog
from resources.codecs.ddl import replay_changelog
from resources.failpoints import failpoint
from resources.kafka.fetch import fetch_values
from platform_assets.io_managers.prostore import BackupSlice, SignalSlice
from resources.lake.layout import LakeLayout
from resources.lake.prostore import (IncrementDelta, MetaRead, TableStats, changelog_history, data_tables,
                                     land_changelogs, land_increment_tables, landed_deltas, record_increments,
                                     unchanged_increment_tables)
from resources.lake.key_check import KeyCheckPlan
from resources.lake.prostore_history import history_ident
from resources.lake.prostore_progress import tables_to_read
from resources.lake.landed_mark import lake_landed_through
from resources.lake.prostore_snapshot import apply_snapshots, at_least, snapshot_progress
from resources.lake.side_by_side import side_by_side
from resources.prostore.delta_index import DeltaIndex
from resources.spark.iceberg import committed_records, ensure_table, replace_deltas
from resources.spark.kafka_reader import table_changes, task_errors
from resources.state.delta_marks import DeltaMarks


@dataclass(frozen=True)
class DatamartKeys:
    """The asset keys of one datamart's group."""

    signal_events: dg.AssetKey
    changelog: dg.AssetKey
    increment: dg.AssetKey
    snapshot: dg.AssetKey
    history: dg.AssetKey

    @classmethod
    def of(cls, datamart: str) -> DatamartKeys:
        return cls(*(dg.AssetKey([datamart, a])
                     for a in ("signal_events", "changelog", "increment", "snapshot", "history")))


def changelog_records(backup: BackupSlice) -> list:
    """The delta's changelog records, fetched from Kafka (a few messages: DDL only)."""
    refs = backup.changelog_refs()
    values = fetch_values(backup.bootstrap, backup.topic, [(r.partition, r.offset) for r in refs],
                          config=backup.consumer_config, timeout=backup.timeout)
    records = []
    for r in refs:
        records += list(iter_changelog(values[(r.partition, r.offset)]))
    return records


def land_delta_step(context: dg.AssetExecutionContext, *, datamart: str, layout: LakeLayout, keys: DatamartKeys,
                    backup: list[BackupSlice], signal: list[SignalSlice] | None, session,
                    index: DeltaIndex, keep_history: bool = True, key_check_every: int = 1,
                    maintaining: bool = False, tables_seen: Callable[[Tables, int], str | None] | None = None) -> Iterator:
    """Land the run's deltas for the selected assets (module docstring); yields their
    materializations and check results, then raises if any asset failed. `keep_history`: the
    snapshot's MERGEs write the versions they close to the history tables first.
    `key_check_every`, `maintaining`: when the snapshot's key check runs and what it looks at
    (`KeyCheckPlan.for_run`). `tables_seen`: given the target's tables and columns, and the
    target, once the snapshot landed (platform_assets/lake_tables.py); what it returns joins
    the step's log line."""
    chosen = context.selected_asset_keys
    history_key = keys.history if keep_history else None
    refuse_history_alone(chosen, history=history_key, snapshot=keys.snapshot)
    span, target = delta_span(backup), backup[-1].delta_num
    # The run's quarantined backup messages by delta: counted on each increment partition, named by a check.
    bad = index.delta_quarantine(backup[0].topic, datamart, backup[0].delta_num, target) \
        if keys.increment in chosen else {}
    outcomes: list[Outcome] = []
    records: dict[int, list] = {}
    if chosen & {keys.changelog, keys.increment}:
        fetched = timed(keys.changelog, lambda: {b.delta_num: changelog_records(b) for b in backup})
        if fetched.error is not None:
            raise step_failure([fetched], span) from fetched.error
        records = fetched.result

    # Phase 1: everything that needs only Kafka's slices and the lake as it was.
    done, early_done = _phase1(session, layout, datamart, keys, chosen, backup, signal, records, index,
                               keep_history=keep_history)
    # What the step did and how long each part took, logged once at the end: each log line is
    # an event Dagster writes to the instance's event log (0.03-0.1 s each on SQLite), and the
    # first of them was written between the phases, on the delta's critical path.
    said = [_phase1_said(span, keys, done, early_done)]

    # Phase 2: the snapshot, if what it needs from this run landed, beside the increment's check.
    # It starts before phase 1's materializations are reported: Dagster writes each event to the
    # instance's event log as it is yielded (0.2-0.3 s for the three), which the engine's work
    # need not wait for.
    before = done.get(keys.snapshot)
    phase2, snapshot_inputs = _phase2_jobs(
        session, layout, datamart, keys, chosen, backup, records, index, done, early_done, bad,
        keep_history=keep_history, key_check_every=key_check_every, maintaining=maintaining)
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="deltaport-asset")
    try:
        running = [pool.submit(timed, key, fn) for key, fn in phase2]
        for key, materialized in ((keys.signal_events, lambda k, o: _signal_materialized(context, k, o, signal)),
                                  (keys.changelog, lambda k, o: _changelog_materialized(context, k, o, backup,
                                                                                        records)),
                                  (keys.increment, lambda k, o: _increment_materialized(
                                      context, said, k, o, backup, layout, datamart, bad))):
            if key in done:
                outcomes.append(done[key])
                if done[key].error is None:
                    yield materialized(key, done[key])
        if before is not None and before.error is not None:
            outcomes.append(before)
        failpoint("step.phase1_reported")
        finished = [f.result() for f in running]
    finally:
        pool.shutdown(wait=True)  # a step stopped while phase 2 runs still waits for its commits
    if finished:
        said.append(", ".join(f"{'increment checks' if o.key == keys.increment else 'snapshot'} {o.seconds:.2f} s"
                              for o in finished))
    outcomes += [o for o in finished if o.error is not None]
    landed = [o for o in finished if o.error is None]
    yield from _phase2_reported(context, keys, landed, layout, datamart, backup, before, snapshot_inputs, history_key)
    if tables_seen is not None and any(o.key == keys.snapshot for o in landed):
        said += [n for n in [tables_seen(table_columns(snapshot_inputs.history.get(target, [])), target)] if n]
    context.log.info("; ".join(said))
    failed = [o for o in outcomes if o.error is not None]
    if failed:
        context.log.error("; ".join(f"{o.key.to_user_string()}: {o.error}" for o in failed))
        raise step_failure(failed, span) from failed[0].error


def _phase1(session, layout: LakeLayout, datamart: str, keys: DatamartKeys, chosen, backup: list[BackupSlice],
            signal: list[SignalSlice] | None, records: dict[int, list], index: DeltaIndex, *,
            keep_history: bool) -> tuple[dict[dg.AssetKey, Outcome], Outcome | None]:
    """Phase 1 (module docstring), side by side: the selected assets' commits and the snapshot's
    read of the lake as it was; in a one-delta run, the early history. Returns each job's
    outcome by asset key, and the early history's (None when not tried)."""
    target = backup[-1].delta_num
    early = keep_history and len(backup) == 1 and {keys.changelog, keys.increment, keys.snapshot} <= chosen
    tables_landed: Future | None = Future() if early else None  # the increment tables' stats, once committed
    # The manifest and changelog from the delta before the run on: the snapshot's lake read needs
    # them, and so does the increment's `unchanged_increment_tables` (that delta's rows): whichever
    # asks first reads them for both, in its own thread, beside the rest of its work.
    meta = MetaRead(session, layout, datamart, since=backup[0].delta_num - 1) \
        if {keys.changelog, keys.snapshot} <= chosen else None
    with ThreadPoolExecutor(max_workers=5, thread_name_prefix="deltaport-asset") as pool:
        def start(key, fn) -> Future | None:
            return pool.submit(timed, key, fn) if key in chosen else None

        signal_job = start(keys.signal_events, lambda: _land_signal_events(session, layout, datamart, signal)) \
            if signal is not None else None
        changelog_job = start(keys.changelog, lambda: land_changelogs(
            session, layout, datamart, [(b.delta_num, b.report.chosen, records[b.delta_num]) for b in backup]))
        increment_job = start(keys.increment, lambda: _land_increment(session, layout, datamart, backup, records,
                                                                      changelog_job, tables_landed, meta))
        # The target's tables, as the snapshot will see them: from this run's changelog if it lands it.
        tables = list(data_tables(replay_changelog(records[target]))) if changelog_job is not None else None
        before_job = start(keys.snapshot, lambda: _lake_before_run(
            session, layout, datamart, target, tables, backup[0].delta_num,
            mark=DeltaMarks(index.store).get(datamart).landed_through if tables else None,
            run_changes=frozenset(t for b in backup for t in (tables or ()) if b.table_refs(t)),
            run_schemas=tuple(data_tables(replay_changelog(records[b.delta_num])) for b in backup) if tables else (),
            meta=meta))
        early_job = pool.submit(timed, keys.snapshot, lambda: _early_history(
            session, layout, datamart, target, records[target], before_job, tables_landed)) if early else None
    done = {f.result().key: f.result() for f in (signal_job, changelog_job, increment_job, before_job) if f}
    # The early history is an optimisation: if it failed, the snapshot's path writes it as before.
    early_done = early_job.result() if early_job is not None else None
    return done, early_done


def _phase1_said(span: str, keys: DatamartKeys, done: dict[dg.AssetKey, Outcome], early_done: Outcome | None) -> str:
    """Phase 1's line of the step's log: what each job took, and which failed."""
    return (f"deltas {span}: " + ", ".join(
        f"{'lake read for snapshot' if k == keys.snapshot else k.path[-1]} {o.seconds:.2f} s"
        f"{'' if o.error is None else ' (failed)'}" for k, o in done.items())
        + (f", history {early_done.seconds:.2f} s{'' if early_done.error is None else ' (left to the snapshot)'}"
           if early_done is not None else ""))


def _phase2_jobs(session, layout: LakeLayout, datamart: str, keys: DatamartKeys, chosen, backup: list[BackupSlice],
                 records: dict[int, list], index: DeltaIndex, done: dict[dg.AssetKey, Outcome],
                 early_done: Outcome | None, bad: dict, *, keep_history: bool, key_check_every: int,
                 maintaining: bool) -> tuple[list, _SnapshotInputs | None]:
    """Phase 2's jobs, (asset key, work): the increment's checks once its tables landed; the
    snapshot once what it needs from this run landed (changelog and increment) and its lake read
    succeeded. Also the snapshot's inputs (phase 1's read merged with the run's own), or None."""
    target = backup[-1].delta_num
    ok = early_done is not None and early_done.error is None
    written = {(t, target): narrowed for t, narrowed in early_done.result.items()} if ok else {}
    landing = [done[k] for k in (keys.changelog, keys.increment) if k in done]
    jobs: list = []
    if keys.increment in done and done[keys.increment].error is None:
        todo, stats, unchanged = done[keys.increment].result
        jobs.append((keys.increment, lambda: checks.increment_checks(
            session, layout, datamart, [(b, t.entities, stats[b.delta_num]) for b, t in zip(backup, todo)],
            index, key=keys.increment, unchanged=unchanged)
            + [checks.quarantine_check(backup[0].topic, bad, key=keys.increment)]))
    before = done.get(keys.snapshot)
    if before is None or before.error is not None or any(o.error is not None for o in landing):
        return jobs, None
    inputs = _merged(before.result, done.get(keys.changelog), done.get(keys.increment), records)
    plan = KeyCheckPlan.for_run([b.delta_num for b in backup], every=key_check_every, every_key=maintaining,
                                asked=keys.increment not in chosen)
    jobs.append((keys.snapshot, lambda: _apply_snapshot(session, layout, datamart, target, inputs, keys.snapshot,
                                                        keep_history, written, key_check=plan)))
    return jobs, inputs


def _phase2_reported(context, keys: DatamartKeys, succeeded: list[Outcome], layout: LakeLayout, datamart: str,
                     backup: list[BackupSlice], before: Outcome | None, inputs: _SnapshotInputs | None,
                     history_key: dg.AssetKey | None) -> Iterator:
    """What phase 2's jobs that succeeded report: the increment's check results; the snapshot's
    materialization and the history asset's."""
    target = backup[-1].delta_num
    for o in succeeded:
        if o.key == keys.increment:
            yield from o.result
            continue
        yield _snapshot_materialized(context, keys.snapshot, o, before.seconds, target, len(backup), layout,
                                     datamart, _columns(inputs.history.get(target, [])))
        applied = o.result[0]
        yield from history_reported(
            context, key=history_key, applied_deltas=sorted({a.delta_num for a in applied}), deltas=delta_span(backup),
            tables=sorted({history_ident(layout, datamart, a.table) for a in applied if a.upserts or a.deletes}))


def _land_signal_events(session, layout: LakeLayout, datamart: str, signal: list[SignalSlice]) -> dict:
    frame = signal_frame(session, signal)
    ident = layout.meta(datamart, "signal_events")
    ensure_table(session, ident, frame.schema, partition_by=["delta_num"])
    commit = replace_deltas(session, ident, frame, [s.delta_num for s in signal])
    live: dict[str, int] = {}  # the table's rows after the commit (one summary query, beside the increment)
    committed_records(session, {ident: commit}, live=live)
    events = [e for s in signal for e in s.events]
    return {"events": len(events), "by_code": dict(Counter(e["code"] for e in events)), "table": ident,
            "deltas": delta_span(signal), "attempts": max((e["attempt"] or 0 for e in events), default=0),
            "row_count": live.get(ident)}


def _increment_delta(session, backup: BackupSlice, records: list) -> IncrementDelta:
    """One delta's increment: its changelog's schema and a frame per table with changes (a small
    delta's rows read now, as Arrow, so a range sends them to Spark at once; a big one's read
    from Kafka by Spark tasks when the frame is evaluated)."""
    entities = replay_changelog(records)
    frames = {}
    for name, entity in data_tables(entities).items():
        refs = backup.table_refs(name)
        if refs:
            frames[name] = table_changes(session, backup.bootstrap, backup.topic, refs, entity.columns,
                                         consumer_config=backup.consumer_config, timeout=backup.timeout,
                                         value_bytes=sum(r.value_bytes for r in refs), local_as_arrow=True)
    return IncrementDelta(backup.delta_num, backup.report.delta_date, backup.report.chosen, entities, frames,
                          {"topic": backup.topic, "offsets": backup.offsets()})


def _land_increment(session, layout: LakeLayout, datamart: str, backup: list[BackupSlice],
                    records: dict[int, list], changelog: Future | None, tables_landed: Future | None = None,
                    meta: MetaRead | None = None):
    """The increment tables, then (once the changelog of the same deltas has landed, when this
    step lands it) the manifest: ([IncrementDelta], {delta: stats}, the tables the run left as
    they were: `unchanged_increment_tables`, from `meta` when the step reads it). `tables_landed`
    gets the stats (or the error) as soon as the tables have committed, before the manifest."""
    try:
        todo = [_increment_delta(session, b, records[b.delta_num]) for b in backup]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltaport-asset") as pool:
            # Read beside the changed tables' writes, which do not wait for it.
            known = pool.submit(unchanged_increment_tables, session, layout, datamart, todo, meta)
            with task_errors():  # a bad message read by a Spark task surfaces as our typed error
                stats = land_increment_tables(session, layout, datamart, todo, known)
        unchanged = known.result()
    except BaseException as exc:
        if tables_landed is not None:
            tables_landed.set_exception(exc)
        raise
    if tables_landed is not None:
        tables_landed.set_result(stats)
    if changelog is not None and changelog.result().error is not None:
        raise ChangelogNotLandedError(f"datamart {datamart!r} delta(s) {delta_span(backup)}: the increment tables "
                                      f"committed but the changelog did not land, so the manifest was not written")
    record_increments(session, layout, datamart, todo, stats)
    return todo, stats, unchanged


def _early_history(session, layout: LakeLayout, datamart: str, delta: int, records: list, before: Future,
                   tables_landed: Future) -> list[str]:
    """The history of the tables delta `delta` changes, once its increment tables have committed
    and the lake before the run was read (`early_history.py`); the tables written."""
    stats = tables_landed.result()[delta]
    lake = before.result()
    if lake.error is not None:
        return []
    tables = early_history_tables(layout, datamart, delta, records, lake.result.progress, lake.result.history, stats)
    return write_early_history(session, layout, datamart, delta, tables, stats, lake.result.rows) if tables else {}


@dataclass(frozen=True)
class _SnapshotInputs:
    landed: dict[int, dict[str, TableStats]]
    history: dict[int, list]
    progress: dict[str, int | None]
    known_from: int | None = None  # landed and history hold the deltas from this one on only
    rows: dict[str, int] = field(default_factory=dict)  # {ident: live rows before the run}, from summaries
    # The tables whose progress the source's mark gave (not read: neither refreshed nor counted).
    unread: frozenset[str] = frozenset()
    # The source's landed mark the progress stands on (`apply_snapshots(floor=)`): the state
    # store's when it is the delta before the run, else the lake's own (None: neither).
    floor: int | None = None


def _lake_before_run(session, layout: LakeLayout, datamart: str, target: int,
                     tables: list[str] | None, first: int | None = None, *, mark: int | None = None,
                     run_changes: frozenset[str] = frozenset(), run_schemas: tuple = (),
                     meta: MetaRead | None = None) -> _SnapshotInputs:
    """What the snapshot needs of the lake as it was before this run: the last applied delta of
    the target's tables (`tables`, or as the lake's changelog of the target says) and their
    rows, and the manifest and changelog history from the lowest of those deltas on (the meta
    tables are partitioned by delta, so the read does not grow with the lake's age);
    everything when a table has no snapshot yet (its first delta) or the lake is not as expected.

    With `tables` known, the three reads go side by side, the meta tables' read from the delta
    before the run's `first` (the lowest last applied delta of a lake that is up to date, as it
    is in steady running, every table taken to be at least at the mark); a lake behind
    that reads them again from where it is. When the source's `landed_through` `mark` is that
    delta, only the tables the run changes (`run_changes`: rows in its increments; then any
    with rows or a DDL change after the mark, `run_schemas` being the run's deltas' tables) are
    read; the others are at the mark (resources/lake/prostore_progress.py says why that is exact).

    A delta commits only to the tables it changes, so a table's own last delta may be far below
    the mark: every table is taken to be at least at the mark (`prostore_snapshot.at_least`), the
    state store's when it is trusted, else the lake's own (`landed_mark.lake_landed_through`,
    read beside the rest), so neither the reads nor the plan go back over deltas that left it alone.
    `meta`: the step's read of the meta tables from the delta before the run on, shared with the
    increment's side (read here if no other part of the step asked first)."""
    rows: dict[str, int] = {}
    if tables:
        guess = (target if first is None else first) - 1
        trusted = mark is not None and mark == guess
        asked = [t for t in tables if t in run_changes] if trusted else tables
        if meta is None or (meta.since, meta.until) != (guess, None):
            meta = MetaRead(session, layout, datamart, since=guess)
        progress, (landed, history), lake_mark = side_by_side(lambda read: read(), [
            (lambda: snapshot_progress(session, layout, datamart, asked, rows=rows) if asked else {},),
            (meta.get,),
            (lambda: None if trusted else lake_landed_through(session, layout, datamart),)])
        floor = mark if trusted else lake_mark
        unread: frozenset[str] = frozenset()
        if trusted:
            read = tables_to_read(tables, mark=mark, first=guess + 1, landed=landed, history=history,
                                  run_changes=run_changes, run_schemas=run_schemas)
            rest = [t for t in tables if t not in asked and (read is None or t in read)]
            if rest:
                progress |= snapshot_progress(session, layout, datamart, rest, rows=rows)
            unread = frozenset(layout.snapshot(datamart, t) for t in tables if t not in asked and t not in rest)
            progress |= dict.fromkeys(unread, mark)
        progress = at_least(layout, datamart, progress, floor, history)
        low = None if None in progress.values() else min(progress.values(), default=None)
        if low is not None and low < guess:
            landed, history = MetaRead(session, layout, datamart, since=low).get()
        if low is not None and low in landed:
            return _SnapshotInputs(landed, history, progress, low, rows, unread, floor)
        return _SnapshotInputs(landed_deltas(session, layout, datamart),
                               changelog_history(session, layout, datamart), progress, rows=rows, unread=unread,
                               floor=floor)
    landed, history, floor = side_by_side(lambda read: read(), [
        (lambda: landed_deltas(session, layout, datamart),),
        (lambda: changelog_history(session, layout, datamart),),
        (lambda: lake_landed_through(session, layout, datamart),)])
    tables = list(data_tables(replay_changelog(history.get(target, []))))
    progress = snapshot_progress(session, layout, datamart, tables, rows=rows)
    return _SnapshotInputs(landed, history, at_least(layout, datamart, progress, floor, history), rows=rows,
                           floor=floor)


def _merged(before: _SnapshotInputs, changelog: Outcome | None, increment: Outcome | None,
            records: dict[int, list]) -> _SnapshotInputs:
    """The lake as this run left it: what phase 1 read, with the run's changelogs and manifest
    rows (each replaces its delta's, as their commits did)."""
    history, landed = dict(before.history), dict(before.landed)
    if changelog is not None:
        history.update(records)
    if increment is not None:
        _, stats, _ = increment.result
        landed.update({n: {s.table: s for s in table_stats} for n, table_stats in stats.items()})
    return replace(before, landed=landed, history=history)


def _apply_snapshot(session, layout: LakeLayout, datamart: str, target: int, inputs: _SnapshotInputs,
                    key: dg.AssetKey, keep_history: bool = True, history_written=None, *,
                    key_check: KeyCheckPlan = KeyCheckPlan()):
    applied = apply_snapshots(session, layout, datamart, target, history=inputs.history, landed=inputs.landed,
                              progress=inputs.progress, known_from=inputs.known_from, keep_history=keep_history,
                              history_written=history_written, rows=inputs.rows, unread=inputs.unread,
                              floor=inputs.floor)
    if key_check.deltas is None and not key_check.every_key:  # not due: the rows as the commits count them
        return applied, _summary_rows(layout, datamart, target, inputs, applied), [
            key_check_not_due(key, applied, key_check.next_due, check_name=checks.PK_UNIQUE)]
    # A range of deltas may take several commits per table (a column change splits it): the check
    # looks at the keys of every delta the plan names, not only those of the target's commit.
    # The tables with no delta recorded before the run: the run's deltas wrote their every row.
    new = [t for t in data_tables(replay_changelog(inputs.history.get(target, [])))
           if inputs.progress.get(layout.snapshot(datamart, t), 0) is None]
    counts, results = checks.snapshot_checks(session, layout, datamart, target, history=inputs.history, key=key,
                                             deltas=key_check.deltas, every_key=key_check.every_key, new=new)
    return applied, counts, results


def _summary_rows(layout: LakeLayout, datamart: str, target: int, inputs: _SnapshotInputs,
                  applied: list) -> dict[str, int]:
    """{table: rows} of the target's tables after the run, with no scan: a table the run
    committed to, as its last commit's summary counts them; any other whose progress was read,
    as its summary did before the run (`LIVE_ROWS_SQL` says when that is exact). A table the
    source's mark answered for (`unread`: the run left it alone) is not counted: that would
    cost the per-table read the mark saves."""
    after = {a.table: a.live_rows for a in applied if a.live_rows is not None}
    tables = data_tables(replay_changelog(inputs.history.get(target, [])))
    return {t: after[t] if t in after else inputs.rows.get(layout.snapshot(datamart, t), 0) for t in sorted(tables)
            if t in after or layout.snapshot(datamart, t) not in inputs.unread}


def _signal_materialized(context, key: dg.AssetKey, outcome: Outcome,
                         signal: list[SignalSlice]) -> dg.MaterializeResult:
    by_delta = {s.delta_num: {
        "events": len(s.events), "dagster/partition_row_count": len(s.events),
        "by_code": dict(Counter(e["code"] for e in s.events)),
        "attempts": max((e["attempt"] or 0 for e in s.events), default=0)} for s in signal}
    if outcome.result.get("row_count") is not None:  # the table's rows after the run, on its last delta
        by_delta[signal[-1].delta_num]["dagster/row_count"] = outcome.result["row_count"]
    per_delta_metadata(context, key, by_delta)
    whole = {k: v for k, v in outcome.result.items() if k in ("table", "deltas")}
    return dg.MaterializeResult(asset_key=key, metadata={**whole, "seconds": round(outcome.seconds, 3)})


def _changelog_materialized(context, key: dg.AssetKey, outcome: Outcome, backup: list[BackupSlice],
                            records: dict[int, list]) -> dg.MaterializeResult:
    by_delta = {}
    for b in backup:
        entities = outcome.result[b.delta_num]  # {delta: the schema its changelog describes}
        by_delta[b.delta_num] = {
            "records": len(records[b.delta_num]), "tables": sorted(data_tables(entities)),
            "views": sorted(n for n, e in entities.items() if e.kind != "table"), "increment_id": b.report.chosen}
    per_delta_metadata(context, key, by_delta)
    return dg.MaterializeResult(asset_key=key, metadata={"deltas": delta_span(backup),
                                                         "seconds": round(outcome.seconds, 3)})


def _increment_materialized(context, said: list[str], key: dg.AssetKey, outcome: Outcome, backup: list[BackupSlice],
                            layout: LakeLayout, datamart: str, bad: dict[int, list]) -> dg.MaterializeResult:
    """The increment's materialization, each delta's counts on its own partition (`bad`: its
    quarantined messages); each delta's rows per table go to the step's log line (`said`)."""
    todo, stats, _ = outcome.result
    by_delta = {}
    for b, landed in zip(backup, todo):
        mine = stats[b.delta_num]
        # The tables the delta changed, not every table of its schema (the manifest names them
        # all): a key or a log entry per untouched table grew with the datamart's width.
        said.append(f"delta {b.delta_num}: " + (", ".join(f"{s.table} {s.rows}" for s in mine if s.rows) or "no rows")
                    + f" ({sum(1 for s in mine if not s.rows)} table(s) left alone)")
        columns = _columns_of(landed.entities)
        by_delta[b.delta_num] = {
            "tables": tables_entry([
                {"table": layout.increment(datamart, s.table), "rows": s.rows, "upserts": s.upserts,
                 "deletes": s.deletes, "columns": columns.get(s.table, "")} for s in mine if s.rows]),
            "rows": sum(s.rows for s in mine), "upserts": sum(s.upserts for s in mine),
            "deletes": sum(s.deletes for s in mine),
            **{f"rows/{s.table}": s.rows for s in sorted(mine, key=_table) if s.rows},
            "delta_date": dg.TimestampMetadataValue(b.report.delta_date / 1e6), "increment_id": b.report.chosen,
            "offsets": b.offsets(), "bytes": b.value_bytes, "messages": len(b.refs),
            "bad_messages": len(bad.get(b.delta_num, ()))}
    per_delta_metadata(context, key, by_delta)
    whole = {"deltas": delta_span(backup), "seconds": round(outcome.seconds, 3)}
    if len(backup) > 1:  # the run's totals, under names no partition's own counts share
        whole.update({"range_rows": sum(m["rows"] for m in by_delta.values()), "range_offsets": _offsets(backup),
                      "range_bytes": sum(b.value_bytes for b in backup)})
    return dg.MaterializeResult(asset_key=key, metadata=whole)


def _columns_of(entities) -> dict[str, str]:
    """{table: its data columns, comma-separated} of a changelog's entities."""
    return {name: ", ".join(c.name for c in e.columns) for name, e in data_tables(entities).items()}


def _columns(records: list) -> dict[str, str]:
    return _columns_of(replay_changelog(records))


def table_columns(records: list) -> Tables:
    """{table: [(column, its DDL type)]} of the tables a changelog's records leave."""
    return {name: [(c.name, f"{c.type}({c.length})" if c.length is not None else c.type) for c in e.columns]
            for name, e in sorted(data_tables(replay_changelog(records)).items())}


def _table(stats: TableStats) -> str:
    return stats.table


def _snapshot_materialized(context, key: dg.AssetKey, outcome: Outcome, read_seconds: float, target: int,
                           deltas: int, layout: LakeLayout, datamart: str,
                           columns: dict[str, str]) -> dg.MaterializeResult:
    """The snapshot's rows go on the run's last delta, as of which they were counted: a range is
    folded into one MERGE per table, so the state as of a delta inside it is not counted (that
    would cost a read per delta); its other partitions say the range's end instead."""
    applied, counts, results = outcome.result
    rows = {**{f"rows/{t}": c for t, c in counts.items()}, "rows": sum(counts.values())}
    changed = changed_tables(applied, counts, lambda t: layout.snapshot(datamart, t), columns)
    per_delta_metadata(context, key, {target: {**rows, "tables": tables_entry(changed)}})
    whole = {"applied_deltas": sorted({a.delta_num for a in applied}), "seconds": round(read_seconds + outcome.seconds, 3)}
    if deltas > 1:
        whole.update({"range_end_delta": target, "range_end_rows": rows["rows"]})
    return dg.MaterializeResult(asset_key=key, check_results=results, metadata=whole)


def _offsets(backups: list[BackupSlice]) -> dict[int, list[int]]:
    """{partition: [first, last]} offset of the run's chosen increments, for metadata."""
    out: dict[int, list[int]] = {}
    for b in backups:
        for part, (lo, hi) in b.offsets().items():
            have = out.setdefault(part, [lo, hi])
            out[part] = [min(have[0], lo), max(have[1], hi)]
    return out
