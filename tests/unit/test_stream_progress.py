"""Which of a change stream's snapshot tables a run reads its progress from, and which the
source's mark answers for (resources/lake/stream_progress.py): pure logic, no Spark."""

from __future__ import annotations

from resources.lake.cdc import CdcLandStats
from resources.lake.stream_progress import stream_tables_to_read

TABLES = ["a", "b", "c", "d"]


def stats(*tables: str, rows: int = 3) -> dict[str, CdcLandStats]:
    return {t: CdcLandStats(t, rows, rows, 0, 0) for t in tables}


def ask(*, mark=4, first=5, landed=None, run_changes=("a",), tables=TABLES):
    landed = {4: stats("a", "b", "c", "d")} if landed is None else landed
    return stream_tables_to_read(tables, mark=mark, first=first, landed=landed, run_changes=run_changes)


def test_a_steady_run_reads_only_the_tables_it_changes():
    assert ask() == {"a"}
    assert ask(run_changes=()) == set()  # a delta of heartbeats only: every table at the mark


def test_without_a_usable_mark_every_table_is_read():
    assert ask(mark=None) is None  # none yet
    assert ask(mark=3) is None  # the source is behind the run (or the run re-lands the past)
    assert ask(mark=5) is None
    assert ask(landed={}) is None  # the manifest does not record the mark: a lake rebuilt or older


def test_changes_landed_after_the_mark_are_read_though_the_run_does_not_name_them():
    # A dead run landed deltas 5..6 (and maybe some tables' commits): what they changed is read.
    landed = {4: stats("a"), 5: stats("b"), 6: {**stats("c"), **stats("d", rows=0)}}
    assert ask(landed=landed) == {"a", "b", "c"}
    # Before-images alone still count as a change of the table (reading one more is never wrong).
    assert ask(landed={4: {}, 5: {"d": CdcLandStats("d", 0, 0, 0, 2)}}, run_changes=()) == {"d"}


def test_a_table_new_in_the_run_is_not_a_snapshot_table_yet():
    assert ask(run_changes=("a", "new")) == {"a"}  # `new` has no snapshot: its progress is None, not read
