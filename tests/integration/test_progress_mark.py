"""A steady delta reads the progress of the tables it changes only; the source's mark answers for
the others (resources/lake/prostore_progress.py), and a run that dies between its tables'
commits, before the mark, is re-run exactly (issue 57, item 2). A delta records only the tables it
changes (item 1): the one it leaves alone gets no tag, and the lake's own mark follows the runs.

Real broker, Spark and Iceberg; an emulated datamart of two tables (seed 23: delta 1 and 3
change `sales` alone, delta 2 both). A death between tables is injected at the snapshot's own
failpoint (`snapshot.table_done`) as an error: the run fails after one table's commit, so the
mark stays where it was, as after a kill.
"""

from __future__ import annotations

import dagster as dg
import pytest

from platform_assets.prostore import delta_step
from resources.lake import prostore_snapshot
from resources.lake.landed_mark import lake_landed_through
from resources.spark.iceberg import DELTA_PROPERTY, _quote
from resources.spark.iceberg_reads import delta_tags
from resources.state.delta_marks import DeltaMarks
from tests.support.killed_between import dies_once_at
from tests.integration.test_delta_step import DM, equal_to_truth, four_deltas_platform, run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    yield from four_deltas_platform(kafka_bootstrap, tmp_path_factory.mktemp("progress-mark"), seed=23, name="mark")


def changed_by(sc, n: int) -> set[str]:
    return {c.table for c in sc.increments[DM][n]}


def commits_of(spark, ident: str, n: int) -> int:
    return spark.sql(f"SELECT count(*) FROM {_quote(ident)}.`snapshots` "
                     f"WHERE summary['{DELTA_PROPERTY}'] = '{n}'").collect()[0][0]


def test_a_delta_reads_the_progress_of_what_it_changes_and_survives_a_death_between_tables(platform, monkeypatch):
    sc, defs, instance, layout, spark = platform
    marks = DeltaMarks(defs.resources["index"].store())
    asked: list[set[str]] = []
    real_progress = delta_step.snapshot_progress

    def spying(session, layout_, datamart, tables, **kwargs):
        asked[-1].update(tables)
        return real_progress(session, layout_, datamart, tables, **kwargs)

    monkeypatch.setattr(delta_step, "snapshot_progress", spying)
    for n in range(4):
        if n >= 2:  # the first table's commit done, then the run dies: the mark stays at n - 1
            real_failpoint = dies_once_at(monkeypatch, prostore_snapshot, "snapshot.table_done")
            asked.append(set())
            assert not run(defs, instance, n).success, n
            assert marks.get(DM).landed_through == n - 1
            monkeypatch.setattr(prostore_snapshot, "failpoint", real_failpoint)
        asked.append(set())
        result = run(defs, instance, n)
        assert result.success, n
        assert marks.get(DM).landed_through == n
        every = set(sc.truth[DM][n])
        # Delta 0: no mark yet, every table read; later, only what the delta changes.
        assert asked[-1] == (every if n == 0 else changed_by(sc, n)), (n, asked[-1])
        for k in range(n + 1):
            assert equal_to_truth(sc, spark, layout, k), (n, k)
    assert changed_by(sc, 3) == {"sales"}  # the story this test relies on: `stores` left alone
    assert lake_landed_through(spark, layout, DM) == 3  # the lake's own mark, moved by every run
    for table in sc.truth[DM][3]:
        ident = layout.snapshot(DM, table)
        tags = delta_tags(spark, ident)
        for n in range(4):  # re-runs after a death apply nothing twice
            assert commits_of(spark, ident, n) <= 1, (table, n)
            # a delta records only the tables it changes (issue 57): no tag where it left one alone
            assert (n in tags) == (n == 0 or table in changed_by(sc, n)), (table, n, sorted(tags))
    rows = next(e.event_specific_data.materialization for e in result.get_asset_materialization_events()
                if e.asset_key == dg.AssetKey([DM, "snapshot"])).metadata
    # The rows of the tables the delta changed are counted; the one the mark answered for is not.
    assert {k for k in rows if k.startswith("rows/")} == {"rows/sales"}
