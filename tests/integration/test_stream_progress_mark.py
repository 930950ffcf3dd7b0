"""A change stream's steady delta reads the progress of the tables it changes only; the source's
mark answers for the others (resources/lake/stream_progress.py), and a run that dies between its
tables' commits, before the mark, is re-run exactly (issue 57, item 2, for change streams).

Real broker, Spark and Iceberg; a Qlik story (several tables, small deltas, so that most deltas
leave some table alone) sealed by the source's sensor and landed delta by delta. A death between
tables is injected at the snapshot's own failpoint (`cdc.applied`) as an error: the run fails
after one table's commit or tags, so the mark stays where it was, as after a kill.
"""

from __future__ import annotations

import os

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions, ledger_resource
from resources.lake import cdc, stream_keys
from resources.lake.cdc import cdc_landed_deltas, cdc_rows_as_of
from resources.lake.layout import LakeLayout
from resources.spark.iceberg import DELTA_PROPERTY, _quote
from resources.state.delta_marks import DeltaMarks
from tests.integration.test_delta_step import stream_run, ticks

pytestmark = pytest.mark.integration

SRC = "src"


@pytest.fixture(scope="module")
def platform(kafka_bootstrap, spark_remote, tmp_path_factory):
    from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish

    story = build_qlik_story(QlikConfig(seed=11, transactions=24, duplicate_rate=0.15))
    topic = f"mark.qlik.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish(story.messages, kafka_bootstrap, {QLIK: topic})
    work = tmp_path_factory.mktemp("stream-mark")
    cfg = parse_config({
        "sources": [{"name": SRC, "format": QLIK, "topic": topic, "idle_seconds": 0, "max_rows": 6,
                     "max_seconds": 3600}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "marklake_qlik", "warehouse": str(work / "lake")},
        "state_dir": str(work / "state"),
    })
    defs = build_definitions(cfg)
    with dg.instance_for_test() as instance:
        ticks(defs, instance, f"{SRC}_seal_sensor", 6)
        yield story, cfg, defs, instance


def commits_of(spark, ident: str, n: int) -> int:
    return spark.sql(f"SELECT count(*) FROM {_quote(ident)}.`snapshots` "
                     f"WHERE summary['{DELTA_PROPERTY}'] = '{n}'").collect()[0][0]


def equal_to_truth_through(kafka_bootstrap, story, cfg, spark, last: int) -> int:
    """Compare every delta up to `last` that the story's oracle can judge with its truth; how many were judged."""
    from resources.changestream.sealing import read_delta
    from resources.emulator.qlik import QLIK
    from resources.emulator.stream_oracle import row_diff, truth_after
    from resources.errors import DecodeError

    ledger, layout, records, judged = ledger_resource(cfg).get(), LakeLayout(cfg.lake.catalog), [], 0
    for d in range(last + 1):
        records += [r for _, rs in read_delta(kafka_bootstrap, ledger, SRC, d, QLIK, timeout=20)
                    if not isinstance(rs, DecodeError) for r in rs]
        truth = truth_after(QLIK, story, records, ledger.delta(SRC, d).watermark_us)
        if truth is None:
            continue
        for table, rows in truth.items():
            if rows:
                diff = row_diff(cdc_rows_as_of(spark, layout, SRC, table, d), rows)
                assert not any(diff.values()), (table, d, diff)
        judged += 1
    return judged


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
    real_failpoint = cdc.failpoint
    left_alone = 0
    for n in range(deltas):
        existing = set(stream_keys.snapshot_tables(spark, layout, SRC))
        if n >= 2 and len(existing) >= 2:  # one table's commit or tags done, then the run dies
            dies = iter([True])

            def dying(name: str) -> None:
                if name == "cdc.applied" and next(dies, False):
                    raise RuntimeError("killed between tables")
                real_failpoint(name)

            monkeypatch.setattr(cdc, "failpoint", dying)
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
    assert equal_to_truth_through(kafka_bootstrap, story, cfg, spark, deltas - 1) >= 2
    for table in stream_keys.snapshot_tables(spark, layout, SRC):
        ident = layout.snapshot(SRC, table)
        for n in range(deltas):  # re-runs after a death apply nothing twice
            assert commits_of(spark, ident, n) <= 1, (table, n)
        # Every delta from the table's first one on is recorded (a tag where it was left alone).
        tags = {r["name"] for r in spark.sql(f"SELECT name FROM {_quote(ident)}.`refs`").collect()}
        first = min(n for n, t in cdc_landed_deltas(spark, layout, SRC).items() if t.get(table) and t[table].rows)
        assert {f"delta_{n}" for n in range(first, deltas)} <= tags, (table, sorted(tags))
