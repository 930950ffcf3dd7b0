"""The one step that lands a run's deltas of a change-stream source (Qlik Replicate, DataWorks,
Datastream): the work behind its three assets (changelog, increment, snapshot), declared
together as one multi-asset.

Why one step: as three steps, each delta's messages were read from Kafka and decoded twice
(changelog, then increment) and every wait on the engine was paid in turn. Here:
1. the run's messages are read and decoded once, for changelog and increment alike;
2. side by side: the changelog's commit; the increment tables' commits and, once they are
   verified and the changelog has committed, the manifest's; the snapshot tables' progress
   (their last applied deltas, rows and tombstones: only the snapshot writes them), of the
   tables the run's deltas change only when the source's mark allows (stream_progress.py);
   a delta commits only to the tables it changes, and once the snapshot's commits are done the
   lake's own mark moves (`landed_mark.mark_landed`), before the state store's;
3. once both have landed: the snapshot (it reads the tables' keys from the changelog table),
   while the landing's materializations are reported (written to Dagster's event log).

The guarantees are those of the three assets as steps: "delta N landed" (the manifest row) is
written only after N's increment tables and changelog; the snapshot runs only after that.
What failed is named when the step fails at its end; what landed is reported as materialized.
A subset (one asset from the UI, a backfill of the snapshot alone) does what those assets did
as steps of their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import dagster as dg

from platform_assets.delta_metadata import changed_tables, per_delta_metadata, tables_entry
from platform_assets.lake_tables import Tables
from platform_assets.history_asset import history_reported, refuse_history_alone
from platform_assets.key_check_skipped import key_check_not_due
from platform_assets.deltas.partitions import delta_span
from platform_assets.step_outcomes import ChangelogNotLandedError, Outcome, step_failure, timed
from platform_assets.streams import checks
from resources.codecs.cdc import BEFORE_IMAGE
from resources.errors import DecodeError
from platform_assets.io_managers.streams import StreamSlice
from resources.lake.cdc import (CdcDelta, apply_cdc_through, cdc_landed_deltas, changes_frame, increment_columns,
                                infer_columns, land_cdc_increments, lowest_applied)
from resources.lake.key_check import KeyCheckPlan
from resources.lake.layout import LakeLayout
from resources.lake.prostore_history import history_ident
from resources.lake.side_by_side import side_by_side
from resources.lake.stream_changelog import changelog_entries, changes_by_table, land_stream_changelogs
from resources.lake.stream_keys import SnapshotProgress, current_keys, snapshot_progress

MAX_ERRORS_SHOWN = 5


@dataclass(frozen=True)
class StreamKeys:
    """The asset keys of one change-stream source's group."""

    changelog: dg.AssetKey
    increment: dg.AssetKey
    snapshot: dg.AssetKey
    history: dg.AssetKey

    @classmethod
    def of(cls, source: str) -> StreamKeys:
        return cls(*(dg.AssetKey([source, a]) for a in ("changelog", "increment", "snapshot", "history")))


@dataclass(frozen=True)
class _Read:
    """One delta's messages as read: the decoded ones [(partition, offset, records)], the bad
    ones (located), and how many were read."""

    delta: StreamSlice
    good: list
    bad: list[str]
    messages: int


def _read(context, stream: StreamSlice) -> _Read:
    good, bad, read = [], [], 0
    for msg, records in stream.read():
        read += 1
        if isinstance(records, DecodeError):
            bad.append(str(records))
        else:
            good.append((msg.partition, msg.offset, records))
    if bad:
        context.log.warning(f"delta {stream.delta_num}: {len(bad)} bad message(s), quarantined when sealed; "
                            f"first: {bad[0]}")
    return _Read(stream, good, bad, read)


def land_stream_step(context: dg.AssetExecutionContext, *, source: str, layout: LakeLayout, keys: StreamKeys,
                     topic: list[StreamSlice], session, keep_history: bool = True, key_check_every: int = 1,
                     maintaining: bool = False, mark: int | None = None,
                     tables_seen: Callable[[set[str], Tables, int], str | None] | None = None) -> Iterator:
    """Land the run's deltas for the selected assets (module docstring); yields their
    materializations and check results, then raises if any asset failed. `keep_history`: the
    snapshot's MERGEs write the versions they close to the history tables first.
    `key_check_every`, `maintaining`: when the snapshot's key check scans and what it looks at
    (`KeyCheckPlan.for_run`). `mark`: the source's `landed_through`; when it is the delta before
    the run, only the tables the run's deltas change have their progress read, the others are
    at it and get nothing (resources/lake/stream_progress.py). A maintenance run checks every table's
    keys, so it reads every table. `tables_seen`: given the tables the run counted or applied, the
    columns of those the run landed, and the target, once the snapshot landed
    (platform_assets/lake_tables.py); what it returns is logged."""
    chosen = context.selected_asset_keys
    history_key = keys.history if keep_history else None
    refuse_history_alone(chosen, history=history_key, snapshot=keys.snapshot)
    span, target = delta_span(topic), topic[-1].delta_num
    reads = [_read(context, d) for d in topic] if chosen & {keys.changelog, keys.increment} else []
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="deltaport-asset") as pool:
        # The snapshot tables' progress, read while the increments land (nothing but the snapshot writes them).
        progress_job = pool.submit(
            snapshot_progress, session, layout, source, mark=None if maintaining else mark, first=topic[0].delta_num,
            run_changes=frozenset(t for r in reads for t in changes_by_table(
                rec for _, _, records in r.good for rec in records))) if keys.snapshot in chosen else None
        changelog_job = (pool.submit(timed, keys.changelog, lambda: _land_changelog(session, layout, source, reads))
                         if keys.changelog in chosen else None)
        increment_job = (pool.submit(timed, keys.increment, lambda: _land_increment(
            context, session, layout, source, reads, changelog_job)) if keys.increment in chosen else None)
    landing = [f.result() for f in (changelog_job, increment_job) if f is not None]
    context.log.info(f"deltas {span}: " + ", ".join(
        f"{o.key.path[-1]} {o.seconds:.2f} s{'' if o.error is None else ' (failed)'}" for o in landing))
    outcomes = list(landing)
    # The snapshot starts before the landing's materializations are reported: Dagster writes each
    # event to the instance's event log as it is yielded, which the engine's work need not wait for.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltaport-asset")
    try:
        plan = KeyCheckPlan.for_run([d.delta_num for d in topic], every=key_check_every, every_key=maintaining,
                                    asked=keys.increment not in chosen)
        snap_job = (pool.submit(timed, keys.snapshot, lambda: _apply_snapshot(
            session, layout, source, target, keys.snapshot, keep_history, plan, progress_job.result()))
                    if keys.snapshot in chosen and all(o.error is None for o in landing) else None)
        for o in landing:
            if o.error is None:
                yield (_changelog_materialized(context, o, topic, reads) if o.key == keys.changelog
                       else _increment_materialized(context, o, topic, reads, layout, source))
            if o.key == keys.increment and o.error is None:
                yield from checks.increment_checks([(r.delta, r.messages, decoded, o.result[1][r.delta.delta_num])
                                                    for r, decoded in zip(reads, o.result[0])], key=keys.increment)
        snap = snap_job.result() if snap_job is not None else None
    finally:
        pool.shutdown(wait=True)  # a step stopped while the snapshot runs still waits for its commits
    if snap is not None:
        context.log.info(f"deltas {span}: snapshot {snap.seconds:.2f} s{'' if snap.error is None else ' (failed)'}")
        outcomes.append(snap)
        if snap.error is None:
            yield _snapshot_materialized(context, snap, target, len(topic), layout, source)
            applied = [a for a in snap.result[0] if not a.skipped]
            yield from history_reported(
                context, key=history_key, applied_deltas=sorted({a.delta_num for a in applied}), deltas=span,
                tables=sorted({history_ident(layout, source, a.table) for a in applied if a.events}))
            if tables_seen is not None:
                increment = next((o for o in landing if o.key == keys.increment and o.error is None), None)
                note = tables_seen(set(snap.result[1]) | {a.table for a in applied},
                                   increment.result[2] if increment else {}, target)
                if note:
                    context.log.info(f"source {source}: {note}")
    failed = [o for o in outcomes if o.error is not None]
    if failed:
        context.log.error("; ".join(f"{o.key.to_user_string()}: {o.error}" for o in failed))
        raise step_failure(failed, span) from failed[0].error


def _land_changelog(session, layout: LakeLayout, source: str, reads: list[_Read]):
    entries = {r.delta.delta_num: changelog_entries(r.good) for r in reads}
    return entries, land_stream_changelogs(session, layout, source, entries)


def _land_increment(context, session, layout: LakeLayout, source: str, reads: list[_Read],
                    changelog: Future | None):
    """The increment tables, then (once the changelog of the same deltas has committed, when
    this step lands it) the manifest: ([row changes decoded per table, per delta], {delta: stats},
    {table: its data columns [(name, Spark type)]})."""
    tables = [changes_by_table(rec for _, _, records in r.good for rec in records) for r in reads]
    named = sorted({t for by_table in tables for t in by_table})
    # Each table's columns so far: the lake's (asked side by side: a source's first delta names
    # every table, each a few catalog round trips), then what the run adds.
    known: dict[str, list] = dict(zip(named, side_by_side(increment_columns,
                                                          [(session, layout, source, t) for t in named])))
    todo, decoded = [], []
    for r, by_table in zip(reads, tables):
        frames = {}
        for t, chs in by_table.items():
            known[t] = infer_columns(chs, known[t])
            frames[t] = changes_frame(session, chs, known[t])
        d = r.delta
        todo.append(CdcDelta(d.delta_num, frames, d.delta.watermark_us, f"{source}:{d.delta_num}",
                             {"topic": d.topic, "offsets": d.offsets(), "sealed_at": d.delta.sealed_at,
                              "reason": d.delta.reason}))
        decoded.append({t: sum(1 for c in chs if c.operation != BEFORE_IMAGE) for t, chs in by_table.items()})

    def changelog_landed() -> None:
        if changelog is not None and changelog.result().error is not None:
            raise ChangelogNotLandedError(f"source {source!r} delta(s) {delta_span([r.delta for r in reads])}: the "
                                          "increment tables committed but the changelog did not land, so the "
                                          "manifest was not written")

    stats = land_cdc_increments(session, layout, source, todo, before_manifest=changelog_landed)
    return decoded, stats, {t: [(name, kind.simpleString()) for name, kind in cols] for t, cols in known.items()}


def _apply_snapshot(session, layout: LakeLayout, source: str, target: int, key: dg.AssetKey, keep_history: bool,
                    plan: KeyCheckPlan, read: SnapshotProgress):
    sizes, tombstones = {}, {}
    since = lowest_applied(list(read.progress.values()))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltaport-asset") as pool:
        # The manifest from the tables' lowest last applied delta on, read beside their keys.
        manifest = pool.submit(cdc_landed_deltas, session, layout, source, since=since)
        keys, progress = current_keys(session, layout, source, target, sizes=sizes, tombstones=tombstones, read=read)
        landed = (since, manifest.result())
    applied = apply_cdc_through(session, layout, source, target, keys, progress=progress, tombstones=tombstones,
                                keep_history=keep_history, landed=landed, untouched=read.untouched(),
                                floor=read.floor)
    if plan.deltas is None and not plan.every_key:  # not due: the rows as the commits count them
        counts = _summary_rows(layout, source, target, keys, progress, applied, sizes, tombstones)
        if counts is not None:
            return applied, counts, [key_check_not_due(key, applied, plan.next_due, check_name=checks.KEY_UNIQUE)]
    # Due (or a table's rows not known without a scan): the keys of the plan's deltas, or every key.
    ran: dict[str, list[int]] = {}
    for a in applied:
        if not a.skipped:
            ran.setdefault(a.table, []).append(a.delta_num)
    deltas = None if plan.every_key else {t: sorted(set(ran.get(t, [])) | set(plan.deltas or ())) for t in keys}
    counts, results = checks.snapshot_checks(session, layout, source, target, keys, asset_key=key, deltas=deltas)
    return applied, counts, results


def _summary_rows(layout: LakeLayout, source: str, target: int, keys, progress, applied, sizes,
                  tombstones) -> dict | None:
    """{table: live rows} of the source's snapshot tables as of `target`, with no scan: a table
    the run committed to, as its commit counts them (`CdcApplied.live_rows`); any other, as its
    newest commit did (rows from the summary, less the tombstones it records). None when some
    table's count is not known that way (its commits made before they recorded tombstones)."""
    after = {a.table: a.live_rows for a in applied if not a.skipped and a.live_rows is not None}
    merged = {a.table for a in applied if not a.skipped and (a.events or a.upserts or a.deletes)}
    out = {}
    for table in keys:
        ident = layout.snapshot(source, table)
        if table in after:
            out[table] = after[table]
        elif table in merged:
            return None
        elif ident in progress and progress[ident] is not None:
            if progress[ident] > target or ident not in sizes or ident not in tombstones:
                return None  # past the run's deltas (a re-run: the scan counts as of them), or not recorded
            out[table] = max(0, sizes[ident] - tombstones[ident])
        elif any(a.table == table and not a.skipped for a in applied):
            return None  # new in this run, with no count of its own
    return dict(sorted(out.items()))


def _changelog_materialized(context, outcome: Outcome, topic: list[StreamSlice],
                            reads: list[_Read]) -> dg.MaterializeResult:
    entries, ident = outcome.result
    bad = {r.delta.delta_num: len(r.bad) for r in reads}
    per_delta_metadata(context, outcome.key, {d.delta_num: {
        "entries": dict(Counter(e.kind for e in entries.get(d.delta_num, []))),
        "tables": sorted({e.table for e in entries.get(d.delta_num, []) if e.table}),
        "bad_messages": bad.get(d.delta_num, 0)} for d in topic})
    return dg.MaterializeResult(asset_key=outcome.key, metadata={
        "table": ident, "deltas": delta_span(topic), "seconds": round(outcome.seconds, 3)})


def _increment_materialized(context, outcome: Outcome, topic: list[StreamSlice], reads: list[_Read],
                            layout: LakeLayout, source: str) -> dg.MaterializeResult:
    """The increment's materialization, each delta's counts on its own partition."""
    _, stats, typed = outcome.result
    columns = {t: ", ".join(name for name, _ in cols) for t, cols in typed.items()}
    read = {r.delta.delta_num: r for r in reads}
    by_delta = {}
    for d in topic:
        mine, r = stats[d.delta_num], read.get(d.delta_num)
        context.log.info(f"delta {d.delta_num}: " + (", ".join(f"{s.table} {s.rows}" for s in mine)
                                                      or "no row change"))
        meta = {
            "tables": tables_entry([{"table": layout.increment(source, s.table), "rows": s.upserts + s.deletes,
                                     "upserts": s.upserts, "deletes": s.deletes, "columns": columns.get(s.table, "")}
                                    for s in mine if s.upserts + s.deletes]),
            "rows": sum(s.upserts + s.deletes for s in mine), "upserts": sum(s.upserts for s in mine),
            "deletes": sum(s.deletes for s in mine), "before_images": sum(s.before_images for s in mine),
            **{f"rows/{s.table}": s.upserts + s.deletes for s in sorted(mine, key=lambda s: s.table)},
            "offsets": d.offsets(), "messages": r.messages if r else 0, "bad_messages": len(r.bad) if r else 0,
            "bad_examples": (r.bad if r else [])[:MAX_ERRORS_SHOWN], "sealed_because": d.delta.reason or ""}
        if d.delta.watermark_us is not None:
            meta["watermark"] = dg.TimestampMetadataValue(d.delta.watermark_us / 1e6)
        by_delta[d.delta_num] = meta
    per_delta_metadata(context, outcome.key, by_delta)
    whole = {"deltas": delta_span(topic), "seconds": round(outcome.seconds, 3)}
    if len(topic) > 1:  # the run's totals, under names no partition's own counts share
        whole.update({"range_rows": sum(m["rows"] for m in by_delta.values()),
                      "range_messages": sum(m["messages"] for m in by_delta.values())})
    return dg.MaterializeResult(asset_key=outcome.key, metadata=whole)


def _snapshot_materialized(context, outcome: Outcome, target: int, deltas: int, layout: LakeLayout,
                           source: str) -> dg.MaterializeResult:
    """The rows go on the run's last delta, as of which they were counted (a range is folded into
    one MERGE per table: the state inside it is not counted); other partitions say the range's end."""
    applied, counts, results = outcome.result
    rows = {**{f"rows/{t}": c for t, c in counts.items()}, "rows": sum(counts.values())}
    changed = changed_tables(applied, counts, lambda t: layout.snapshot(source, t))
    per_delta_metadata(context, outcome.key, {target: {**rows, "tables": tables_entry(changed)}})
    whole = {"applied_deltas": sorted({a.delta_num for a in applied if not a.skipped}),
             "events_applied": sum(a.events for a in applied), "seconds": round(outcome.seconds, 3)}
    if deltas > 1:
        whole.update({"range_end_delta": target, "range_end_rows": rows["rows"]})
    return dg.MaterializeResult(asset_key=outcome.key, check_results=results, metadata=whole)
