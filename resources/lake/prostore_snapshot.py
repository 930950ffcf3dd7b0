"""A Prostore datamart's snapshot tables: applying landed increments in order, and reading a
table as of any delta. The layout, the schema-change rules and the guarantees are in
`resources/lake/prostore.py`'s docstring; this module is its snapshot half.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby

from resources.codecs.ddl import ColumnTransition, EntitySchema, column_transition, replay_changelog
from resources.failpoints import failpoint
from resources.lake.landed_mark import mark_landed
from resources.lake.layout import LakeLayout
from resources.lake.prostore import (MissingDeltasError, TableStats, _c, _struct, _table_columns, changelog_history,
                                     data_tables, landed_deltas)
from resources.lake.history_read import state_as_of
from resources.lake.prostore_history import (all_closed, ensure_history_table, mark_history_start,
                                             snapshot_properties, stamped, version_fields, write_closed_versions,
                                             write_history)
from resources.lake.side_by_side import side_by_side
from resources.lake.versions_view import follow_columns
from resources.spark import existence
from resources.spark.iceberg import ensure_table, table_exists, without_session_properties
from resources.spark.iceberg import DeltaCommit
from resources.spark.iceberg_reads import InsideFold, live_rows, record_unchanged, writer_progress
from resources.spark.iceberg_merge import (KeyFilter, checkpoint_checked, insert_into_new, latest_per_key,
                                           merge_upserts, narrow_to_changed_keys)


@dataclass(frozen=True)
class Applied:
    delta_num: int
    table: str
    upserts: int
    deletes: int
    live_rows: int | None = None  # the table's rows after the step's commit, as its summary counts them


def snapshot_progress(spark, layout: LakeLayout, datamart: str, tables: Sequence[str], *,
                      rows: dict[str, int] | None = None) -> dict[str, int | None]:
    """{snapshot ident: its last applied delta, or None} of every named table, a missing table
    as None; one query (`last_applied_deltas`, missing tags repaired), as `apply_snapshots`
    asks it for its target's tables. A table big enough turns generated code on for the
    session (`codegen.generate_code_for`): the apply and the checks that follow read it whole.
    `rows`: filled with {ident: live rows}, as the current commit's summary counts them."""
    idents = [layout.snapshot(datamart, t) for t in tables]
    return dict.fromkeys(idents) | writer_progress(spark, idents, sizes=rows)


def apply_snapshots(spark, layout: LakeLayout, datamart: str, target: int, history=None, *,
                    landed: Mapping[int, Mapping[str, TableStats]] | None = None,
                    progress: Mapping[str, int | None] | None = None,
                    known_from: int | None = None, keep_history: bool = True,
                    history_written: Mapping[tuple[str, int], KeyFilter | None] | None = None,
                    rows: Mapping[str, int] | None = None, unread: frozenset[str] = frozenset(),
                    floor: int | None = None) -> list[Applied]:
    """Bring every snapshot table of the datamart to delta `target`, delta by delta, in order.

    Each table starts after its own last applied delta (from its commit summaries), so a crash
    between tables, or a re-run, applies nothing twice; a table born in delta k starts at k.
    A delta commits only to the tables it changes (issue 57): a step with no rows and the same
    DDL as the delta before, on a table that has a recorded delta already, is left out of the
    plan (no commit, no tag); a table's first step (its birth: an empty commit) and a DDL change
    with no rows still commit. `floor`: the source's landed mark (`resources/lake/landed_mark.py`,
    or the state store's when it stands for the lake): a table with a recorded delta below it
    that the mark's delta has with the same DDL is taken to be at it (`at_least`), so its plan
    does not go back over deltas that left it alone.
    Fails with MissingDeltasError, before writing anything, if a delta that some table still
    needs has not landed as an increment. When a table's DDL changed since the delta last
    applied to it, the delta's commit also carries the schema change (module docstring).

    What the caller has read already, or knows because it has just written it, is not read
    again: `history`, the datamart's `changelog_history`; `landed`, the manifest
    (`landed_deltas`); `progress`, the `snapshot_progress` of the target's tables, read after
    the last snapshot commit (nothing else writes them: one run at a time per datamart).
    `known_from`: `history` and `landed` hold only the deltas from this one on (read `since` it:
    the lowest last applied delta of the target's tables, which must be in `landed`); a table
    whose DDL is needed from before it makes the whole history be read. `keep_history`: write
    the versions each delta closes to the history tables first (`resources/lake/prostore_history.py`);
    `history_written`: {(table, delta): the MERGE's key filter worked out for it, or None} whose
    history the caller has written already, from the table as it is now
    (platform_assets/prostore/early_history.py), for a plain one-delta step.
    `rows`: {ident: live rows} of the tables as `snapshot_progress` read them (the MERGEs weigh
    their key filter with them instead of asking). `unread`: idents in `progress` whose progress
    came from the source's mark, not from a read (resources/lake/prostore_progress.py): their
    cached metadata is refreshed before their first tag, as that read would have.
    """
    landed = landed_deltas(spark, layout, datamart) if landed is None else landed
    written = history_written or {}
    history = changelog_history(spark, layout, datamart) if history is None else history
    if target not in landed:
        raise MissingDeltasError(datamart, target, [target])
    first = min(landed)
    tables_at: dict[int, dict[str, EntitySchema]] = {}

    def schema_at(n: int) -> dict[str, EntitySchema]:
        if n not in tables_at:
            tables_at[n] = data_tables(replay_changelog(history.get(n, [])))
        return tables_at[n]

    # The progress of the target's tables in one query (a table dropped before the target is
    # asked for on its own); a table not there yet (born later, or never) starts at the first
    # landed delta.
    asked: dict[str, int | None] = at_least(layout, datamart, dict(progress or {}), floor, history)
    recorded: set[str] = set()  # the tables with a recorded delta (a commit or tag) before their next step

    def last_applied(name: str) -> int:
        ident = layout.snapshot(datamart, name)
        if ident not in asked:
            read = snapshot_progress(spark, layout, datamart, [name] if asked else list(schema_at(target)))
            asked.update(at_least(layout, datamart, read, floor, history))
        done = asked[ident]
        if done is not None:
            recorded.add(name)
        return done if done is not None else first - 1

    last = {name: last_applied(name) for name in schema_at(target)}
    start = min(last.values(), default=target) + 1
    missing = [n for n in range(max(start, first), target + 1) if n not in landed]
    if missing:
        raise MissingDeltasError(datamart, target, missing)
    plan = []  # (delta, entity, stats, transition), in the order they are applied
    for n in range(max(start, first), target + 1):
        for name, entity in sorted(schema_at(n).items()):
            if name not in last:  # a table dropped by `target`: its own progress, not a guess
                last[name] = last_applied(name)
            if last[name] >= n:
                continue
            if known_from is not None and first <= last[name] < known_from:  # a table left behind
                history, known_from = {**changelog_history(spark, layout, datamart), **history}, None
            stats = landed[n].get(name, TableStats(name, 0, 0, 0))
            if name in recorded and left_alone(stats) and n - 1 in history and schema_at(n - 1).get(name) == entity:
                continue  # delta n left the table as it was: nothing records it (issue 57)
            before = schema_at(last[name]).get(name) if last[name] in history else None
            plan.append((n, entity, stats, column_transition(before, entity) if before is not None else None))
            last[name] = n
            recorded.add(name)
    prepared = _prepare_ranges(spark, layout, datamart, plan)
    unrefreshed = set(unread)

    def step_done(step, commit_id: str) -> list[Applied]:
        deltas, entity = [n for n, *_ in step], step[-1][1]
        size = (rows or {}).get(layout.snapshot(datamart, entity.name))
        if len(step) > 1:
            commit = _apply_fold(spark, layout, datamart, deltas, [e for _, e, _, _ in step], prepared[entity.name],
                                 commit_id, keep_history, sum(stats.rows for _, _, stats, _ in step), size)
        else:
            n, entity, stats, transition = step[0]
            ident = layout.snapshot(datamart, entity.name)
            commit = _apply_delta(spark, layout, datamart, n, entity, stats, transition, prepared.get(entity.name),
                                  commit_id, keep_history, history_written=(entity.name, n) in written,
                                  target_size=size, key_filter=written.get((entity.name, n)),
                                  refreshed=ident not in unrefreshed)
            unrefreshed.discard(ident)  # a table's steps run one after another
        failpoint("snapshot.table_done")
        after = live_rows(commit.summary) if commit is not None else None
        return [Applied(n, e.name, stats.upserts, stats.deletes, after) for n, e, stats, _ in step]

    # The steps that start at the same delta (one per table) go side by side, sharing a commit
    # id (one commit per table), so that their MERGEs share the session's commit properties;
    # the next delta's steps wait for them, so every table still goes forward in delta order.
    groups = [list(g) for _, g in groupby(_fold_steps(plan, prepared), key=lambda step: step[0][0])]
    applied = []
    for i, group in enumerate(groups):
        commit_id = uuid.uuid4().hex
        applied += [a for done in side_by_side(step_done, [(step, commit_id) for step in group]) for a in done]
        if i + 1 < len(groups):
            failpoint("snapshot.delta_done")
    # Every table is at `target` now: the lake's own mark moves (readers bound "as of" by it).
    mark_landed(spark, layout, datamart, target)
    return applied


def left_alone(stats: TableStats) -> bool:
    """The manifest says the delta has no row of the table (it names every table of a delta)."""
    return not (stats.rows or stats.upserts or stats.deletes)


def at_least(layout: LakeLayout, datamart: str, progress: dict[str, int | None], floor: int | None,
             history: Mapping[int, list]) -> dict[str, int | None]:
    """`progress` ({snapshot ident: last applied delta}) with every table that has a recorded
    delta below `floor` (the source's landed mark: every delta up to it has landed in every
    table) and is in the mark's delta with the same DDL taken to be at `floor`: no delta in
    between changed it, or that delta's commit would record it. A table the mark's delta does
    not have (dropped since its last delta, maybe created again) keeps its own last delta: the
    plan must see that transition. Without the mark's changelog in `history`, nothing changes."""
    if floor is None or floor not in history:
        return progress
    there = {layout.snapshot(datamart, name) for name in data_tables(replay_changelog(history[floor]))}
    return {ident: floor if done is not None and done < floor and ident in there else done
            for ident, done in progress.items()}


def _fold_steps(plan, prepared: Mapping[str, object]) -> list[list]:
    """The plan cut into steps, each applied in one commit: per table, a run of its planned
    deltas whose columns did not change and whose changes `_prepare_ranges` checked together,
    with rows in at least one of them, is one step (folded: one MERGE of the last change per
    key); any other delta is a step of its own. A delta between two of a run's that is not in
    the plan left the table alone (no rows, the same DDL): the fold's commit records it too
    (its deltas are consecutive, `_apply_fold`). Steps come in the order of their first delta,
    so each table still goes forward in delta order."""
    runs: list[list] = []
    open_run: dict[str, list] = {}  # table -> its run being built
    for item in plan:
        n, entity, _, transition = item
        run = open_run.get(entity.name)
        foldable = entity.name in prepared and _plain(transition)
        if foldable and run is not None:
            run.append(item)
            continue
        run = [item]
        runs.append(run)
        open_run[entity.name] = run if foldable else None
    steps = []
    for run in runs:
        if len(run) > 1 and any(stats.rows for _, _, stats, _ in run):
            steps.append(run)
        else:  # nothing to fold: each delta its own step, as a run of one delta would
            steps += [[item] for item in run]
    return sorted(steps, key=lambda step: step[0][0])


def _plain(transition: ColumnTransition | None) -> bool:
    """A delta whose columns did not change since the table's last one: its MERGE needs only its rows."""
    return transition is None or not (transition.recreated or transition.renamed or transition.added)


def _prepare_ranges(spark, layout: LakeLayout, datamart: str, plan) -> dict[str, object]:
    """{table: its changes of every planned delta, checkpointed}, for tables with rows in two or
    more planned deltas under one primary key: read from the increment table and materialized
    once, exact duplicates dropped and keys checked per delta in that same job, before any
    commit. A range run's MERGEs then cost no job besides their own."""
    from pyspark.sql import functions as F

    by_table: dict[str, list] = {}
    for n, entity, stats, transition in plan:
        if stats.rows and _plain(transition):
            by_table.setdefault(entity.name, []).append((n, tuple(entity.primary_key)))
    # Checked here: a table's range (two deltas or more, one key); one delta, or a key that
    # changed, is checked by the delta's own MERGE.
    ranges = [(name, items) for name, items in sorted(by_table.items())
              if len(items) >= 2 and len({key for _, key in items}) == 1]

    def checked(name: str, items: list):
        deltas = [n for n, _ in items]
        changes = (spark.table(layout.increment(datamart, name)).where(F.col("delta_num").isin(*deltas))
                   .drop("_kafka_partition", "_kafka_offset"))
        return checkpoint_checked(layout.snapshot(datamart, name), changes, items[0][1], deltas=deltas,
                                  delta_column="delta_num")

    return dict(zip([name for name, _ in ranges], side_by_side(checked, ranges)))


def _apply_fold(spark, layout: LakeLayout, datamart: str, deltas: Sequence[int], entities: Sequence[EntitySchema],
                prepared, commit_id: str | None = None, keep_history: bool = True,
                rows: int | None = None, target_size: int | None = None) -> DeltaCommit:
    """One commit taking one snapshot table from its state before `deltas` (consecutive, no
    column change among them) to the state after the last: the MERGE of each key's last change
    in them (`prepared`: the table's checked changes of the range). The commit records the
    deltas and is tagged with the last; `snapshot_as_of` reads the states between. A delta
    between two of `deltas` left the table alone (`_fold_steps`): the commit records it as well,
    so what it records stays consecutive."""
    from pyspark.sql import functions as F

    deltas = list(range(deltas[0], deltas[-1] + 1))

    ident = layout.snapshot(datamart, entities[-1].name)
    struct, created, changed = None, False, False
    for entity in entities:  # a dropped column stays in the table; none is added inside a fold
        if _struct(entity.columns) != struct:
            struct = _struct(entity.columns)
            ensured = ensure_table(spark, ident, _struct(entity.columns, version_fields()),
                                   properties=snapshot_properties(keep_history))
            created, changed = created or ensured.created, changed or ensured.changed
    if changed:
        follow_columns(spark, layout, datamart, entities[-1].name, keep_history=keep_history)
    keys = list(entities[-1].primary_key)
    table = spark.table(ident)
    schema = table.schema
    changes = _table_columns(stamped(prepared.where(F.col("delta_num").between(deltas[0], deltas[-1]))),
                             schema, extra=["sys_op", "delta_num", "delta_date"])
    if not created:
        mark_history_start(spark, ident, deltas[0], keep_history)
    last = latest_per_key(changes, keys, order_column="delta_num").drop("delta_num", "delta_date")
    narrowed = None
    if keep_history:
        narrowed = narrow_to_changed_keys(spark, ident, last.select(*[_c(k) for k in keys]), keys, rows=rows,
                                          target_size=target_size)
        write_closed_versions(spark, layout, datamart, entities[-1].name, table, schema, changes, keys, deltas,
                              rows=rows, key_filter=narrowed.text if narrowed.prunes else None)
    return merge_upserts(spark, ident, last, keys, delta_num=deltas[-1], checked=True, folded=deltas,
                         commit_id=commit_id, rows=rows, target_size=target_size, key_filter=narrowed)


def snapshot_as_of(spark, layout: LakeLayout, datamart: str, table: str, delta_num: int,
                   primary_key: Sequence[str], *, last: int | None = None, mark=None):
    """The snapshot table as it was right after `delta_num` (every column it has, data columns
    and `sys_from`), as `history_read.state_as_of` resolves it (`resources/lake/as_of.py`): the
    table as it is, the versions current at N from the table and its history, the newest tag at
    or below N (a delta that left the table alone has none), or no rows; for a delta inside a
    folded commit (`_apply_fold`), the state before the fold with the fold's changes up to N
    applied, each key's last change winning. Raises `DeltaNotLandedError` for a delta above the
    source's landed one. `last`, `mark`: as `state_as_of` takes them."""
    from pyspark.sql import functions as F

    state = state_as_of(spark, layout, datamart, table, delta_num, last=last, mark=mark)
    if not isinstance(state, InsideFold):
        return state
    fold, schema, base = state.fold, state.schema, state.base
    keys = list(primary_key)
    changes = (spark.table(layout.increment(datamart, table))
               .where(F.col("delta_num").between(fold.deltas[0], delta_num))
               .drop("delta_date", "_kafka_partition", "_kafka_offset"))
    last = _table_columns(latest_per_key(changes, keys, order_column="delta_num").drop("delta_num"), schema,
                          extra=["sys_op"])
    kept = base.join(last.select(*[_c(k) for k in keys]), on=keys, how="left_anti")
    return kept.unionByName(last.where(F.col("sys_op").isNull() | (F.col("sys_op") != 1)).drop("sys_op"))


def _apply_delta(spark, layout: LakeLayout, datamart: str, n: int, entity: EntitySchema, stats: TableStats,
                 transition: ColumnTransition | None, prepared=None, commit_id: str | None = None,
                 keep_history: bool = True, history_written: bool = False,
                 target_size: int | None = None, key_filter: KeyFilter | None = None,
                 refreshed: bool = True) -> DeltaCommit | None:
    """One commit taking one snapshot table from its state after the previous delta to delta n
    (returned; None when no row changed: the table's birth, an empty commit, or a DDL change
    with no row, a tag).

    `transition`: how the table's columns changed since the delta last applied (None: not
    known, nothing to carry over). `prepared`: the table's checked changes of a range
    (`_prepare_ranges`), used when the delta's columns did not change. `history_written`: the
    versions the delta closes are in the history already (written from the same pre-state).
    `refreshed`: the session's cached metadata of the table was refreshed by this run's
    progress read (False: refreshed here, before anything reads it)."""
    from pyspark.sql import functions as F

    ident = layout.snapshot(datamart, entity.name)
    if not refreshed:
        existence.refreshed(spark, ident)
    existed = table_exists(spark, ident)
    before = spark.table(ident).schema if existed else None  # read once: each read is a round trip
    had = {f.name.lower() for f in before.fields} if before is not None else set()
    if existed and transition is not None and transition.recreated:
        # A new table of the same name: the old one's rows go, closed in the history as deleted.
        if keep_history:
            _close_all(spark, layout, datamart, entity.name, ident, n)
        with without_session_properties(spark):  # other tables' MERGEs may be running beside
            spark.sql(f"DELETE FROM {'.'.join(f'`{p}`' for p in ident.split('.'))}")
    ensured = ensure_table(spark, ident, _struct(entity.columns, version_fields()),
                           properties=snapshot_properties(keep_history), current=before)
    created = ensured.created
    if ensured.changed:
        follow_columns(spark, layout, datamart, entity.name, keep_history=keep_history)
    # Rows the delta does not write still change when a column was renamed (the new name takes
    # the old name's value) or added again after a drop (the stale value must not come back).
    carry: dict[str, str | None] = {}
    if transition is not None and not transition.recreated:
        carry = dict(transition.renamed)
        carry.update({c: None for c in transition.added if c.lower() in had})
    table = spark.table(ident)
    schema = ensured.schema if ensured.schema is not None else table.schema
    if stats.rows == 0 and not carry:
        # No row: the table is born at n (an empty commit), or its DDL changed with no row to
        # carry (the tag records the change; a delta that changed nothing is not in the plan).
        # The table was refreshed when this run read its progress (`snapshot_progress`) or above,
        # and the run holds the datamart.
        record_unchanged(spark, ident, schema, n, new=not existed, refresh=False)
        return None
    keys = list(entity.primary_key)
    if prepared is not None and _plain(transition):
        changes = prepared.where(F.col("delta_num") == n)
    else:
        changes = (spark.table(layout.increment(datamart, entity.name)).where(F.col("delta_num") == n)
                   .drop("_kafka_partition", "_kafka_offset"))
    changes = _table_columns(stamped(changes), schema, extra=["sys_op", "delta_num", "delta_date"])
    checked = prepared is not None and _plain(transition)
    if created and not carry:
        # Born at n, so empty before it: the delta closes no version (its history write would
        # commit no row) and every change is an insert (`insert_into_new`). The history table
        # is made all the same (follow_columns made it where views are kept): another engine's
        # SQL names it (docs/using.md), and it reads as no closed version.
        if keep_history and not layout.versions_views:
            ensure_history_table(spark, layout, datamart, entity.name, schema)
        return insert_into_new(spark, ident, changes.drop("delta_num", "delta_date"), keys, delta_num=n,
                               columns=[f.name for f in schema.fields], checked=checked, commit_id=commit_id)
    if not created:
        mark_history_start(spark, ident, n, keep_history)
    recreated = existed and transition is not None and transition.recreated
    if not carry:
        narrowed = key_filter
        if keep_history and not recreated and not history_written:
            # The MERGE's key filter, worked out once: a short one also prunes the history's read.
            narrowed = narrow_to_changed_keys(spark, ident, changes.select(*[_c(k) for k in keys]), keys,
                                              rows=stats.rows, target_size=target_size)
            write_closed_versions(spark, layout, datamart, entity.name, table, schema, changes, keys, [n],
                                  rows=stats.rows, key_filter=narrowed.text if narrowed.prunes else None)
        # the MERGE checks the keys in its own job, or they were checked with the range
        return merge_upserts(spark, ident, changes.drop("delta_num", "delta_date"), keys, delta_num=n,
                             checked=checked, commit_id=commit_id,
                             rows=stats.rows, target_size=target_size, key_filter=narrowed)
    # The rows the delta does not write come from the table itself: materialized (and checked)
    # before the MERGE rewrites that table.
    untouched = table.join(changes.select(*[_c(k) for k in keys]), on=keys, how="left_anti")
    types = {f.name: f.dataType for f in schema.fields}
    # A column added again after a drop wipes the old values the rows kept under its name, so
    # each untouched row's version closes here and a new one (without them) starts: the history
    # keeps what an as-of read of an earlier delta must see. A rename wipes nothing.
    readded = any(v is None for v in carry.values())
    date = F.lit(_delta_date(spark, layout, datamart, n)).cast("timestamp_ntz")
    restamp = {"sys_from": F.lit(n).cast("bigint").alias("sys_from"),
               "sys_from_date": date.alias("sys_from_date")} if readded else {}
    untouched = untouched.select(
        *[(_c(carry[f.name]) if carry[f.name] is not None else F.lit(None)).cast(types[f.name]).alias(f.name)
          if f.name in carry else restamp.get(f.name, _c(f.name)) for f in schema.fields],
        F.lit(0).cast("int").alias("sys_op"))
    changes = changes.drop("delta_num", "delta_date")
    changes = checkpoint_checked(ident, changes.unionByName(untouched), keys, deltas=[n])
    if keep_history:
        written = changes.withColumn("delta_num", F.lit(n).cast("bigint")).withColumn("delta_date", date)
        if not readded:  # only the delta's own changes close versions
            written = written.join(untouched.select(*[_c(k) for k in keys]), on=keys, how="left_anti")
        write_closed_versions(spark, layout, datamart, entity.name, table, schema, written, keys, [n])
    if changes.isEmpty():  # a rename in an empty table, with no change in the delta
        record_unchanged(spark, ident, schema, n)
        return None
    return merge_upserts(spark, ident, changes, keys, delta_num=n, checked=True, commit_id=commit_id)


def _delta_date(spark, layout: LakeLayout, datamart: str, n: int):
    """Delta n's close time (naive UTC), from the manifest (it has a row for every landed delta)."""
    import datetime as dt

    from pyspark.sql import functions as F

    micros = (spark.table(layout.meta(datamart, "manifest")).where(F.col("delta_num") == n)
              .agg(F.max("delta_date_us")).first()[0])
    return None if micros is None else dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)

def _close_all(spark, layout: LakeLayout, datamart: str, name: str, ident: str, n: int) -> None:
    """Delta n recreates the table: every current version closes as deleted (history partition n)."""
    from pyspark.sql import functions as F

    table = spark.table(ident)
    if table.isEmpty():  # a re-run after the DELETE below: the versions were closed before it
        return
    date = F.lit(_delta_date(spark, layout, datamart, n)).cast("timestamp_ntz")
    schema = table.schema
    write_history(spark, layout, datamart, name, schema, all_closed(table, schema, n, date), [n])
