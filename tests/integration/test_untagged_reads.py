"""The Spark readers on a lake where a delta commits only to the tables it changes (issue 57, item 1):
no `delta_<N>` tag on a table delta N left alone, the source's landed delta on its manifest
(`deltaport.landed-through`, `resources/lake/landed_mark.py`, moved at the end of
`apply_snapshots` / `apply_cdc_through`).

The lakes: the emulator's `marketing` (seed 29: `sales` untouched in deltas 2-6, `stores` in 0 and
3-7, `returns` born by DDL in 4 and untouched after; deltas 3, 5 and 6 change nothing), landed
twice from the same backup topic with range runs (0, 1-2, 3, 4-6, 7: `stores` folds 1-2), once
keeping history and once without. The writers land them in the new shape, which is checked first
against the emulator's increments: a delta that left a table alone (no tag, not inside one of its
folds) has no change of it, a tagged delta (but a table's birth) or its fold has one, and the
mark is the last delta. Then the old shape (deltaport before issue 57: every table tagged every
delta it existed in, but inside its folds, each untouched delta on its tag before; no mark) is
made by hand, read, and turned back into the new shape.

Checked against the emulator's truth: every table as of every delta (`rows_as_of`: the history,
the newest tag at or below N, a fold's rebuild, the table as it is), on both shapes; `deltaport
read` (Spark engine) prints on the new shape what it printed on the old (every delta, and with no
form the source's landed delta, named on stderr); a user asset's `DeltaView` gives the same rows;
a delta above the mark is "not landed" (the library's `DeltaNotLandedError`, the CLI's one-line
error), and while the mark is one behind a table's last commit (a run in flight) the delta before
reads exact. A lake without the mark reads as before: the old shape here, test_read_cli.py,
test_history_forms.py and test_snapshot_ranges.py.

A Qlik change stream, each table's changes in deltas of their own (so every delta leaves the other
table alone; a range run folds 3-5; no history), gets the same treatment: the new shape checked,
`cdc_rows_as_of` against the truth and equal to its rows on the old shape, a table before its
first delta empty, `cdc_recorded_deltas` from each table's first delta to the mark, and the
stream export's increments (plain, and a snapshot export starting at a delta that left a table
alone) the same on both shapes.
"""

from __future__ import annotations


import pytest
import yaml

from platform_assets.build_on_view import DeltaView
from platform_assets.cli import main
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.lake.as_of import LANDED_PROPERTY, DeltaNotLandedError
from resources.lake.landed_mark import lake_landed_through, mark_landed
from resources.lake.layout import LakeLayout
from resources.lake.prostore_snapshot import apply_snapshots
from resources.lake.read import rows_as_of
from resources.spark.iceberg import _quote
from resources.spark.iceberg_reads import delta_tags, folded_commits
from resources.spark.session import CatalogConfig, connect
from tests.support.landing import land_delta, published_backup

pytestmark = pytest.mark.integration

DM = "marketing"
CONFIG = EmulatorConfig(seed=29, deltas=8, datamarts=(DM,), rows_per_delta=3, cancel_rate=0.0, ddl_at_delta=4,
                        streams=2, chunk_size=5, backup_partitions=2, faults=Faults(duplicate_rate=0.05))
APPLY_AT = (0, 2, 3, 6, 7)  # the snapshot runs: 1-2 and 4-6 are range runs (folds)


def recorded(spark, ident: str) -> tuple[dict[int, int], list[tuple[int, ...]]]:
    """The table's `delta_<N>` tags ({N: snapshot id}) and its folds (each fold's deltas)."""
    return delta_tags(spark, ident), [c.deltas for c in folded_commits(spark, ident)]


def untouched_deltas(spark, layout: LakeLayout, source: str, tables, last: int, exists) -> dict[str, list[tuple[int, int]]]:
    """{table: [(N, snapshot id)]}: each delta N from the table's first tag to `last` where the
    table exists (`exists(table, N)`) with no tag of it and not inside one of its folds (N in a
    fold's deltas below the last), with the snapshot of its newest tag below N (the table as N
    left it): the deltas the writers left the table alone."""
    out: dict[str, list[tuple[int, int]]] = {}
    for table in tables:
        tags, folds = recorded(spark, layout.snapshot(source, table))
        for n in range(min(tags), last + 1):
            if n in tags or any(n in f and n < max(f) for f in folds) or not exists(table, n):
                continue
            out.setdefault(table, []).append((n, tags[max(m for m in tags if m <= n)]))
    return out


def assert_new_shape(spark, layout: LakeLayout, source: str, tables, last: int, exists, changed) -> dict[str, list]:
    """The lake as the writers land it (issue 57): the mark is `last`; a delta that left a table
    alone (`untouched_deltas`, returned) has no change of it in the truth (`changed(table, a, b)`:
    one in deltas a..b), and every tag but a table's first (its birth) records a change: of its
    delta, or of its fold's."""
    assert lake_landed_through(spark, layout, source) == last
    for table in tables:
        tags, folds = recorded(spark, layout.snapshot(source, table))
        for n in list(tags)[1:]:
            lo = min((min(f) for f in folds if max(f) == n), default=n)
            assert changed(table, lo, n), ("a tag with no change", source, table, n)
    untouched = untouched_deltas(spark, layout, source, tables, last, exists)
    for table, deltas in untouched.items():
        for n, _ in deltas:
            assert not changed(table, n, n), ("no tag on a change", source, table, n)
    return untouched


def to_old_shape(spark, layout: LakeLayout, source: str, untouched: dict[str, list[tuple[int, int]]]) -> None:
    """The shape deltaport wrote before issue 57, by hand: every untouched delta tagged on the
    table's snapshot as that delta left it, and no lake mark."""
    for table, deltas in untouched.items():
        ident = _quote(layout.snapshot(source, table))
        for n, snapshot_id in deltas:
            spark.sql(f"ALTER TABLE {ident} CREATE TAG `delta_{n}` AS OF VERSION {snapshot_id}")
    spark.sql(f"ALTER TABLE {_quote(layout.meta(source, 'manifest'))} UNSET TBLPROPERTIES ('{LANDED_PROPERTY}')")
    assert lake_landed_through(spark, layout, source) is None


def back_to_new_shape(spark, layout: LakeLayout, source: str, untouched: dict[str, list[tuple[int, int]]],
                      mark: int | None) -> None:
    """Undo `to_old_shape`: the added tags dropped, and (unless `mark` is None) the mark set again."""
    for table, deltas in untouched.items():
        ident = _quote(layout.snapshot(source, table))
        for n, _ in deltas:
            spark.sql(f"ALTER TABLE {ident} DROP TAG IF EXISTS `delta_{n}`")
    if mark is not None:
        mark_landed(spark, layout, source, mark)


@pytest.fixture(scope="module")
def lakes(spark_remote, kafka_bootstrap, tmp_path_factory):
    """{"history": ..., "plain": ...}: (session, layout, config path) of the two lakes, as the writers land them."""
    sc = build_scenario(CONFIG)
    assert sorted(sc.truth[DM]) == list(range(CONFIG.deltas))
    work = tmp_path_factory.mktemp("untagged")
    topic, index = published_backup(sc, kafka_bootstrap, work, "untagged")
    out = {}
    for name, keep in (("history", True), ("plain", False)):
        warehouse = work / name
        catalog = f"untag{name}"
        session, layout = connect(spark_remote, CatalogConfig(name=catalog, warehouse=str(warehouse))), LakeLayout(catalog)
        for n in sorted(sc.truth[DM]):
            land_delta(session, layout, kafka_bootstrap, topic, index, DM, n, apply=False)
            if n in APPLY_AT:
                apply_snapshots(session, layout, DM, n, keep_history=keep)
        config = work / f"{name}.yaml"
        config.write_text(yaml.safe_dump({
            "sources": [{"name": DM, "format": "prostore", "signal_topic": "s", "backup_topic": "b"}],
            "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: `read` reads the lake only
            "lake": {"catalog": catalog, "type": "hadoop", "warehouse": str(warehouse)},
            "state_dir": str(work / f"state-{name}")}))
        out[name] = (session, layout, config)
    return sc, out


def truth_rows(sc, table: str, n: int) -> list[dict]:
    key = sc.databases[DM].tables[table].primary_key
    return sorted(sc.truth[DM][n][table].values(), key=lambda r: tuple(r[k] for k in key))


def read_cli(config, capsys, table: str, *flags) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["read", f"{DM}.{table}", "--config", str(config), "--engine", "spark", *flags])
    got = capsys.readouterr()
    return code, got.out, got.err


def view_rows(session, layout, deltas) -> dict:
    """{(delta, table): sorted rows} as a user asset's `DeltaView` gives them."""
    out = {}
    for view in DeltaView.for_deltas(session, layout.catalog, DM, "prostore", deltas):
        for table in view.tables():
            out[view.delta, table] = sorted(map(repr, (r.asDict() for r in view.table(table).collect())))
    return out


@pytest.mark.parametrize("name", ["plain", "history"])
def test_every_table_as_of_every_delta_without_the_tags_of_untouched_tables(lakes, name, capsys):
    sc, built = lakes
    session, layout, config = built[name]
    deltas = sorted(sc.truth[DM])
    last = deltas[-1]
    every = [(n, t) for n in deltas for t in sorted(sc.truth[DM][n])]

    tables = sorted(set().union(*sc.truth[DM].values()))

    def changed(table, a, b):
        return any(c.table == table for n in range(a, b + 1) for c in sc.increments[DM][n])

    def exists(table, n):
        return table in sc.truth[DM][n]

    # The lake as the writers land it: no tag where a delta left the table alone, and the mark.
    untouched_by = assert_new_shape(session, layout, DM, tables, last, exists, changed)
    assert set(untouched_by) == {"sales", "stores", "returns"} and len(untouched_by["sales"]) >= 2, untouched_by
    untouched = {(n, t) for t, ns in untouched_by.items() for n, _ in ns}
    assert untouched & {(n, t) for n, t in every} == untouched  # every one is read below
    assert (last, "stores") in untouched and (last, "returns") in untouched, "the last delta left tables alone"
    for n, t in every:
        assert rows_as_of(session, layout, DM, t, n) == truth_rows(sc, t, n), (name, "as landed", t, n)

    # The lake as deltaport wrote it before (no mark, a tag per delta): what the readers gave.
    to_old_shape(session, layout, DM, untouched_by)
    assert untouched_deltas(session, layout, DM, tables, last, exists) == {}
    for n, t in every:
        assert rows_as_of(session, layout, DM, t, n) == truth_rows(sc, t, n), (name, "before", t, n)
    printed = {}
    for n, t in every:
        code, out, err = read_cli(config, capsys, t, "--as-of-delta", str(n))
        assert code == 0, err[-2000:]
        printed[n, t] = out
    viewed = view_rows(session, layout, deltas)
    # Deltas inside a fold (without history: rebuilt from the state before it and the increments).
    inside = {(n, t) for n, t in every for c in folded_commits(session, layout.snapshot(DM, t))
              if n in c.deltas and n < max(c.deltas)}
    assert (1, "stores") in inside, inside

    # Back to the new shape, the mark set below.
    back_to_new_shape(session, layout, DM, untouched_by, None)
    assert untouched_deltas(session, layout, DM, tables, last, exists) == untouched_by
    assert lake_landed_through(session, layout, DM) is None

    # A run in flight: every table committed through the last delta, the mark one behind. The
    # delta before reads exact (the last delta's commits are not seen), the last is not landed.
    assert mark_landed(session, layout, DM, last - 1)
    for t in sorted(sc.truth[DM][last - 1]):
        assert rows_as_of(session, layout, DM, t, last - 1) == truth_rows(sc, t, last - 1), (name, "in flight", t)
    with pytest.raises(DeltaNotLandedError, match=f"delta {last} has not landed.*last landed: {last - 1}"):
        rows_as_of(session, layout, DM, "sales", last)
    assert mark_landed(session, layout, DM, last) and not mark_landed(session, layout, DM, last - 1)
    assert lake_landed_through(session, layout, DM) == last

    # Back as landed (checked against the truth first, above): `read` prints what it printed on
    # the old shape, and a user asset's view gives the same rows.
    for n, t in every:
        code, out, err = read_cli(config, capsys, t, "--as-of-delta", str(n))
        assert code == 0 and out == printed[n, t], (name, t, n, err[-2000:])
    assert view_rows(session, layout, deltas) == viewed

    # With no form: the source's landed delta, also for a table the last delta left alone.
    code, out, err = read_cli(config, capsys, "stores")
    assert code == 0 and out == printed[last, "stores"], err[-2000:]
    assert f"as of delta {last}," in err, err
    # Above the mark: not landed, in the library and as the CLI's one-line error.
    with pytest.raises(DeltaNotLandedError, match=f"delta {last + 1} has not landed"):
        rows_as_of(session, layout, DM, "stores", last + 1)
    code, out, err = read_cli(config, capsys, "stores", "--as-of-delta", str(last + 1))
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err[-2000:]
    assert lines[0].startswith("deltaport read: error: ") and f"delta {last + 1} has not landed" in lines[0], lines


def test_a_change_stream_without_the_tags_of_untouched_tables(spark_remote, tmp_path, monkeypatch):
    from resources.codecs.cdc import Change
    from resources.codecs.qlik import QlikDecoder
    from resources.emulator.qlik import QlikConfig, build_qlik_story
    from resources.lake import stream_export
    from resources.lake.cdc import CdcDelta, apply_cdc_through, cdc_rows_as_of, changes_frame, infer_columns, \
        land_cdc_increments
    from resources.lake.cdc_read import cdc_recorded_deltas
    from resources.lake.stream_changelog import changelog_entries, lake_table, land_stream_changelogs
    from tests.integration.test_cdc_lake import changes_by_table, decoded, transaction_cuts
    from tests.integration.test_stream_history import same

    session, layout = connect(spark_remote, CatalogConfig(name="untagqlik", warehouse=str(tmp_path))), \
        LakeLayout("untagqlik")
    src = "qlikalone"
    story = build_qlik_story(QlikConfig(seed=11, transactions=24, duplicate_rate=0.15))
    decoder = QlikDecoder()
    pairs = decoded(story.messages, decoder.decode)
    records = [rec for _, rec in pairs]
    parts = 3
    bounds = [0, *transaction_cuts(pairs, lambda r: isinstance(r, Change) and r.last_in_transaction, parts), len(records)]

    def name(ch):
        return lake_table(ch.namespace, ch.table)  # the lake's table, as the platform names it

    keys = {name(r): tuple(r.key_columns) for r in records if isinstance(r, Change)}
    story_table = {name(r): r.table for r in records if isinstance(r, Change)}
    types = {t: infer_columns(chs, []) for t, chs in changes_by_table(records, name).items()}
    chunks = [changes_by_table(records[lo:hi], name) for lo, hi in zip(bounds, bounds[1:])]
    truths = [story.state_after(max(r.order_key for r in records[:hi] if isinstance(r, Change))) for hi in bounds[1:]]
    first, second = sorted(keys)  # each chunk is two deltas: one table's changes, then the other's
    assert all(set(chunk) == {first, second} for chunk in chunks)
    deltas = [(i, t) for i in range(parts) for t in (first, second)]  # delta n: table t's changes of chunk i
    land_cdc_increments(session, layout, src, [CdcDelta(n, {t: changes_frame(session, chunks[i][t], types[t])})
                                               for n, (i, t) in enumerate(deltas)])
    land_stream_changelogs(session, layout, src, {n: changelog_entries([(0, n, chunks[i][t])])
                                                  for n, (i, t) in enumerate(deltas)})

    def truth(table, n):
        """The table's rows after delta n: its state after the last chunk whose changes of it landed."""
        i = max((i for i, t in deltas[:n + 1] if t == table), default=None)
        key = keys[table]
        rows = [] if i is None else truths[i][story_table[table]].values()
        return None if i is None else list({tuple(r[k] for k in key): r for r in rows}.values())

    last = len(deltas) - 1
    for n in (0, 1, 2, last):  # 3-5 as one fold
        apply_cdc_through(session, layout, src, n, keys, keep_history=False)
    every = [(n, t) for n in range(len(deltas)) for t in (first, second) if truth(t, n) is not None]

    def changed(table, a, b):
        return any(t == table for _, t in deltas[a:b + 1])

    def exists(table, n):
        return (n, table) in every

    # As the writers land it: every delta left one table alone (but inside the other's fold).
    untouched_by = assert_new_shape(session, layout, src, (first, second), last, exists, changed)
    assert untouched_by and sum(map(len, untouched_by.values())) >= 3, untouched_by
    landed = {(n, t): cdc_rows_as_of(session, layout, src, t, n) for n, t in every}

    # The old shape (a tag per delta, no mark): the rows and the export's increments deltaport gave.
    to_old_shape(session, layout, src, untouched_by)
    before = {(n, t): cdc_rows_as_of(session, layout, src, t, n) for n, t in every}
    for (n, t), rows in before.items():
        same(rows, truth(t, n), f"{t} as of {n}, before")
        assert rows == landed[n, t], (t, n)  # as landed (the lake is that again below, but for tags)

    exported = []
    real = stream_export.encode_increment

    def capturing(name, number, date, increment_id, changelog, tables, options):
        exported.append((number, {t: sorted(map(repr, p.rows)) for t, p in tables.items()}))
        return real(name, number, date, increment_id, changelog, tables, options)

    # Plain: every delta after the first. A snapshot export differs from it at its first delta
    # only (the whole state): delta 1 left `first` alone, so it must hold `first`'s state.
    exports = ((False, list(range(1, len(deltas)))), (True, [1]))
    assert 1 in {n for n, _ in untouched_by.get(first, ())}, untouched_by
    monkeypatch.setattr(stream_export, "encode_increment", capturing)
    for snapshot, wanted in exports:
        list(stream_export.export_stream(session, layout, src, wanted, snapshot=snapshot))
    exported_before, exported[:] = list(exported), []

    back_to_new_shape(session, layout, src, untouched_by, last)
    assert lake_landed_through(session, layout, src) == last
    assert untouched_deltas(session, layout, src, (first, second), last, exists) == untouched_by
    # From each table's first delta to the mark, those that left it alone too (the export's gate).
    for t in (first, second):
        born = min(n for n, table in every if table == t)
        assert cdc_recorded_deltas(session, layout.snapshot(src, t)) == set(range(born, last + 1)), t
    # Before its first delta a table had no rows (no tag at or below: rule 7's "absent").
    assert (0, second) not in every and cdc_rows_as_of(session, layout, src, second, 0) == []
    with pytest.raises(DeltaNotLandedError):
        cdc_rows_as_of(session, layout, src, first, last + 1)
    for snapshot, wanted in exports:
        list(stream_export.export_stream(session, layout, src, wanted, snapshot=snapshot))
    assert exported == exported_before and any(rows for _, parts_ in exported for rows in parts_.values())
