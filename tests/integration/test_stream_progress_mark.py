"""A change stream's steady delta reads the progress of the tables it changes only; the source's
mark answers for the others (resources/lake/stream_progress.py), and a run that dies between its
tables' commits, before the mark, is re-run exactly (issue 57, item 2, for change streams).

Real broker, Spark and Iceberg; a Qlik story (several tables, small deltas, so that most deltas
leave some table alone) sealed by the source's sensor and landed delta by delta. A death between
tables is injected at the snapshot's own failpoint (`cdc.applied`) as an error: the run fails
after one table's commit, so the mark stays where it was, as after a kill. A delta commits only to
the tables it changes (issue 57): the tables it leaves alone get no tag.
"""

from __future__ import annotations

import dagster as dg
import pytest

from platform_assets.definitions import ledger_resource
from resources.lake import cdc, stream_keys
from resources.lake.cdc import cdc_landed_deltas
from resources.lake.layout import LakeLayout
from resources.spark.iceberg import DELTA_PROPERTY, _quote
from resources.state.delta_marks import DeltaMarks
from tests.integration.test_delta_step import qlik_story_platform, stream_run
from tests.support.killed_between import dies_once_at
from tests.support.qlik_truth import judged_qlik_deltas

pytestmark = pytest.mark.integration

SRC = "src"


@pytest.fixture(scope="module")
def platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    # Deltas of at most 6 rows: most leave one of the story's tables alone.
    yield from qlik_story_platform(kafka_bootstrap, tmp_path_factory.mktemp("stream-mark"), name="mark",
                                   max_rows=6, ticks_count=6)


def commits_of(spark, ident: str, n: int) -> int:
    return spark.sql(f"SELECT count(*) FROM {_quote(ident)}.`snapshots` "
                     f"WHERE summary['{DELTA_PROPERTY}'] = '{n}'").collect()[0][0]


def test_a_stream_delta_reads_the_progress_of_what_it_changes_and_survives_a_death_between_tables(
        kafka_bootstrap, platform, monkeypatch):
    story, cfg, defs, instance = platform
    spark = defs.resources["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)
    marks = DeltaMarks(defs.resources["index"].store())
    deltas = len(instance.get_dynamic_partitions(f"{SRC}_deltas"))
    assert deltas >= 5, deltas
    asked: list[set[str]] = []
    real_progress = stream_keys.writer_progress

    def spying(session, idents, **kwargs):
        asked[-1].update(idents)
        return real_progress(session, idents, **kwargs)

    monkeypatch.setattr(stream_keys, "writer_progress", spying)
    left_alone = 0
    for n in range(deltas):
        existing = set(stream_keys.snapshot_tables(spark, layout, SRC))
        if n >= 2 and len(existing) >= 2:  # one table's commit or tags done, then the run dies
            real_failpoint = dies_once_at(monkeypatch, cdc, "cdc.applied")
            asked.append(set())
            assert not stream_run(defs, instance, n).success, n
            assert marks.get(SRC).landed_through == n - 1
            monkeypatch.setattr(cdc, "failpoint", real_failpoint)
        asked.append(set())
        result = stream_run(defs, instance, n)
        assert result.success, n
        assert marks.get(SRC).landed_through == n
        changed = {t for t, s in cdc_landed_deltas(spark, layout, SRC, since=n)[n].items() if s.rows}
        # Delta 0: no mark yet (and no table); later, only the existing tables the delta changes.
        want = {layout.snapshot(SRC, t) for t in (existing if n == 0 else changed & existing)}
        assert asked[-1] == want, (n, asked[-1], want)
        left_alone += bool(existing - changed) and n > 0
        rows = next(e.event_specific_data.materialization for e in result.get_asset_materialization_events()
                    if e.asset_key == dg.AssetKey([SRC, "snapshot"])).metadata
        if n > 0:  # the rows of the tables the delta changed are counted; those the mark answered for are not
            assert {k for k in rows if k.startswith("rows/")} == {f"rows/{t}" for t in changed}, (n, rows)
    assert left_alone >= 2, "the story this test relies on: deltas that leave some table alone"
    assert judged_qlik_deltas(kafka_bootstrap, ledger_resource(cfg).get(), story, spark, layout, SRC,
                              range(deltas)) >= 2
    for table in stream_keys.snapshot_tables(spark, layout, SRC):
        ident = layout.snapshot(SRC, table)
        for n in range(deltas):  # re-runs after a death apply nothing twice
            assert commits_of(spark, ident, n) <= 1, (table, n)
        # A delta records only what it changes (issue 57): no tag where it left the table alone,
        # and every delta whose changes moved the table's state has its tag.
        tags = {r["name"] for r in spark.sql(f"SELECT name FROM {_quote(ident)}.`refs`").collect()
                if r["name"].startswith("delta_")}
        touched = {n for n, t in cdc_landed_deltas(spark, layout, SRC).items() if t.get(table) and t[table].rows}
        assert tags and tags <= {f"delta_{n}" for n in touched}, (table, sorted(tags), sorted(touched))
        moved = {int(r[0]) for r in spark.sql(
            f"SELECT summary['{DELTA_PROPERTY}'] FROM {_quote(ident)}.`snapshots` "
            f"WHERE summary['{DELTA_PROPERTY}'] IS NOT NULL").collect()}
        assert {f"delta_{n}" for n in moved} <= tags, (table, sorted(tags), sorted(moved))
