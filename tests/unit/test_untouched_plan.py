"""A delta commits only to the tables it changes (issue 57): the writers' pure parts. Which
tables are taken to be at the source's landed mark (`prostore_snapshot.at_least`, `cdc.at_mark`),
which of a table's deltas a change stream applies (`cdc.changed_span`), and how a Prostore
range's steps fold across the deltas the plan left out (`prostore_snapshot._fold_steps`)."""

from __future__ import annotations

from resources.codecs.backup import ChangelogRecord
from resources.codecs.ddl import replay_changelog
from resources.lake.cdc import CdcLandStats, at_mark, changed_span
from resources.lake.layout import LakeLayout
from resources.lake.prostore import TableStats, data_tables
from resources.lake.prostore_snapshot import _fold_steps, at_least, left_alone

DM = "dm"
LAYOUT = LakeLayout("lake")


def create(i: int, table: str) -> ChangelogRecord:
    return ChangelogRecord(i, DM, f"CREATE TABLE {DM}.{table} (id BIGINT NOT NULL, v VARCHAR, PRIMARY KEY (id)) "
                                  "DISTRIBUTED BY (id)")


BOTH = [create(1, "a"), create(2, "b")]
A_ONLY = [create(1, "a"), ChangelogRecord(3, DM, f"DROP TABLE {DM}.b")]


def ident(t: str) -> str:
    return LAYOUT.snapshot(DM, t)


def test_a_table_below_the_mark_that_the_marks_delta_has_is_at_the_mark():
    progress = {ident("a"): 2, ident("b"): 7, ident("c"): None}
    got = at_least(LAYOUT, DM, progress, 5, {5: BOTH})
    assert got == {ident("a"): 5, ident("b"): 7, ident("c"): None}  # above it, and no table yet, stay
    assert progress[ident("a")] == 2  # the caller's dict is not changed


def test_a_table_the_marks_delta_does_not_have_keeps_its_own_last_delta():
    # b dropped after its last delta: the plan must see its transition from there (a re-creation)
    assert at_least(LAYOUT, DM, {ident("a"): 2, ident("b"): 2}, 5, {5: A_ONLY}) == {ident("a"): 5, ident("b"): 2}


def test_without_a_mark_or_its_changelog_nothing_moves():
    progress = {ident("a"): 2}
    assert at_least(LAYOUT, DM, progress, None, {5: BOTH}) == progress
    assert at_least(LAYOUT, DM, progress, 5, {4: BOTH}) == progress


def test_a_stream_table_below_the_mark_is_at_it():
    assert at_mark({"x": 1, "y": 9, "z": None}, 4) == {"x": 4, "y": 9, "z": None}
    assert at_mark({"x": 1}, None) == {"x": 1}


def cdc(rows: int) -> CdcLandStats:
    return CdcLandStats("t", rows, rows, 0, 0)


def test_a_stream_tables_deltas_are_cut_to_those_from_its_first_to_its_last_change():
    landed = {4: {}, 5: {"t": cdc(3)}, 6: {"u": cdc(1)}, 7: {"t": cdc(0)}, 8: {"t": cdc(2)}, 9: {}}
    assert changed_span(landed, "t", [4, 5, 6, 7, 8, 9]) == [5, 6, 7, 8]  # consecutive: a fold's deltas
    assert changed_span(landed, "t", [6, 7]) == []
    assert changed_span(landed, "u", [4, 5, 6, 7]) == [6]


def test_a_delta_with_no_row_of_a_table_left_it_alone():
    assert left_alone(TableStats("a", 0, 0, 0))
    assert not left_alone(TableStats("a", 2, 2, 0))


def test_a_range_folds_across_the_deltas_that_left_the_table_alone():
    entity = data_tables(replay_changelog(BOTH))["a"]
    other = data_tables(replay_changelog(BOTH))["b"]
    rows = TableStats("a", 2, 2, 0)
    # a changed by 3 and 5 (4 left it alone: not in the plan), b by 4 only
    plan = [(3, entity, rows, None), (4, other, TableStats("b", 1, 1, 0), None), (5, entity, rows, None)]
    steps = _fold_steps(plan, {"a": object()})
    assert [[n for n, *_ in step] for step in steps] == [[3, 5], [4]]
    # a table whose changes were not prepared together (no range check) takes a step per delta
    assert [[n for n, *_ in step] for step in _fold_steps(plan, {})] == [[3], [4], [5]]
