"""Which snapshot tables a run reads its progress from, and which the source's mark answers for
(resources/lake/prostore_progress.py): pure logic, no Spark."""

from __future__ import annotations

from resources.codecs.backup import ChangelogRecord
from resources.codecs.ddl import replay_changelog
from resources.lake.prostore import TableStats, data_tables
from resources.lake.prostore_progress import tables_to_read

DM = "dm"
TABLES = ["a", "b", "c", "d"]


def create(i: int, table: str, columns: str = "id BIGINT NOT NULL, v VARCHAR") -> ChangelogRecord:
    return ChangelogRecord(i, DM, f"CREATE TABLE {DM}.{table} ({columns}, PRIMARY KEY (id)) DISTRIBUTED BY (id)")


BASE = [create(i + 1, t) for i, t in enumerate(TABLES)]


def stats(*tables: str) -> dict[str, TableStats]:
    return {t: TableStats(t, 3, 2, 1) for t in tables}


def schemas(records) -> dict:
    return data_tables(replay_changelog(records))


def ask(*, mark=4, first=5, landed=None, history=None, run_changes=("a",), run_schemas=None, tables=TABLES):
    landed = {4: stats("a"), 5: stats("a")} if landed is None else landed
    history = {4: BASE} if history is None else history
    run_schemas = [schemas(BASE)] if run_schemas is None else run_schemas
    return tables_to_read(tables, mark=mark, first=first, landed=landed, history=history,
                          run_changes=run_changes, run_schemas=run_schemas)


def test_steady_delta_reads_only_the_tables_it_changes():
    assert ask() == {"a"}


def test_no_usable_mark_reads_every_table():
    assert ask(mark=None) is None
    assert ask(mark=3) is None  # the mark is behind the run: a table may be anywhere in between
    assert ask(mark=5) is None  # ahead (a re-run of landed deltas): the tables' own commits say
    assert ask(landed={5: stats("a")}) is None  # the manifest does not record the mark: lake rebuilt, or older
    assert ask(history={5: BASE}) is None


def test_rows_landed_after_the_mark_are_read_even_beyond_the_run():
    # a run that died after committing some tables' later deltas: those tables' commits are the truth
    assert ask(landed={4: stats("a"), 5: stats(), 7: stats("c")}) == {"a", "c"}
    # the manifest names the tables a delta left alone too, with no rows
    assert ask(landed={4: stats("a"), 5: {**stats("a"), "b": TableStats("b", 0, 0, 0)}}) == {"a"}


def test_ddl_changes_and_new_tables_are_read():
    altered = [*BASE, ChangelogRecord(9, DM, f"ALTER TABLE {DM}.b ADD COLUMN w INT")]
    born = [*BASE, create(10, "e")]
    assert ask(run_schemas=[schemas(altered)]) == {"a", "b"}
    assert ask(run_schemas=[schemas(born)], tables=[*TABLES, "e"]) == {"a", "e"}
    assert ask(history={4: BASE, 5: altered}) == {"a", "b"}  # a landed changelog after the mark
    recreated = [*BASE, ChangelogRecord(11, DM, f"DROP TABLE {DM}.d"), create(12, "d", "id BIGINT NOT NULL")]
    assert ask(run_schemas=[schemas(recreated)]) == {"a", "d"}


def test_only_the_targets_tables_are_named():
    assert ask(run_changes=("a", "gone")) == {"a"}
