"""The fault suite's quick cases (bench/faults.py; `make faults` runs them at full size).

Bad input at scale, smaller: each of the five wire formats gets seeded corruptions mixed into
its emulated story on the real broker, read by the sensor's own code in bounded ticks. Every
message read is accounted for, nothing crashes, every corruption that cannot be valid is
quarantined with its coordinates, and no good message is.

Three kills of `make faults`' eleven: `deltaport sync` SIGKILLed between a snapshot MERGE's
commit and its delta tag, in a range run (before the fix, the interrupted delta had no tag),
while table maintenance compacts a snapshot table after the range, and after every snapshot
commit of the range but before the lake's own landed mark moves (issue 57); the next sync lands
every delta equal to the truth, nothing twice, every delta that changed a table recorded on it.
And a change stream's sync killed while its two tables' MERGEs run side by side.
"""

from __future__ import annotations

import pytest

from bench.fault_kills import KILLS, publish_story, run_kill_case
from bench.faults import FORMATS, run_corruption_case

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fmt", FORMATS)
def test_corruptions_are_quarantined_and_the_good_messages_kept(kafka_bootstrap, tmp_path, fmt):
    row = run_corruption_case(kafka_bootstrap, fmt, corruptions=120, seed=3, work=tmp_path, max_messages=100)
    assert row.crashed is None, row.crashed
    assert row.read == row.produced and row.ticks > 2, row  # several bounded ticks, every message read
    assert row.must_fail > 0 and row.must_fail_quarantined == row.must_fail, row
    assert row.good_quarantined == 0 and row.without_location == 0, row
    assert row.survived


@pytest.mark.parametrize("case", ["kill-snapshot-commit-before-tag", "kill-inside-compaction",
                                  "kill-before-landed-mark"])
def test_a_killed_sync_converges_on_the_next(spark_remote, kafka_bootstrap, tmp_path, case):
    row = run_kill_case(kafka_bootstrap, spark_remote, publish_story(kafka_bootstrap, seed=5, deltas=2), case,
                        KILLS[case], tmp_path)
    assert row.killed and row.recovered, row.problems
    assert (row.rows_lost, row.rows_duplicated, row.increment_rows_extra, row.increment_rows_missing) == (0, 0, 0, 0), row
    assert row.deltas_applied_twice == 0 and row.untagged_deltas == 0 and not row.problems, row
    assert row.survived


def test_a_sync_killed_while_a_streams_tables_merge_together_converges(spark_remote, kafka_bootstrap, tmp_path):
    """A change stream's tables MERGE side by side, each commit with its own key columns and
    tombstones (resources/spark/session_properties.py): `deltaport sync` SIGKILLed 150 ms after the
    second table's MERGE was sent (the first's still running or just committed), then run again,
    lands every sealed delta equal to the truth, once, on both read engines."""
    import os

    import yaml

    from bench.fault_kills import _sync
    from platform_assets.config import load_config
    from platform_assets.definitions import build_definitions, ledger_resource
    from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
    from resources.kafka.admin import create_topic
    from resources.kafka.publish import publish
    from resources.lake.cdc import cdc_landed_deltas
    from resources.lake.layout import LakeLayout
    from resources.lake.stream_keys import snapshot_tables
    from resources.spark.iceberg import DELTA_PROPERTY, _quote
    from tests.support.read_engines import every_sealed_delta_equals_the_truth

    source = "kill_qlik"
    story = build_qlik_story(QlikConfig(seed=11, transactions=12, duplicate_rate=0.15))
    topic = f"kills.qlik.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish(story.messages, kafka_bootstrap, {QLIK: topic})
    config = tmp_path / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        # idle_seconds 0: the story's quiet tail is sealed as soon as it is read
        "sources": [{"name": source, "format": QLIK, "topic": topic, "max_rows": 20, "max_seconds": 3600,
                     "idle_seconds": 0}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "spark": {"remote": spark_remote},
        "lake": {"catalog": "kill_streams", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
    }))
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "DELTAPORT_FAILPOINTS", "DAGSTER_HOME")}
    first = _sync(tmp_path, {**env, "DELTAPORT_FAILPOINTS": "snapshot.merge@2~150"}, 600)
    assert first.returncode == -9, (first.returncode, (first.stdout + first.stderr)[-2000:])
    cfg = load_config(str(config))
    spark = build_definitions(cfg).resources["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)
    assert cdc_landed_deltas(spark, layout, source)  # killed in the snapshot, after the deltas landed
    second = _sync(tmp_path, env, 600)
    assert second.returncode == 0, (second.stdout + second.stderr)[-2000:]

    deltas, rows = every_sealed_delta_equals_the_truth(story, QLIK, cfg, spark, source, kafka_bootstrap)
    assert deltas >= 3 and rows > 20, (deltas, rows)
    tables = snapshot_tables(spark, layout, source)
    assert len(tables) == 2, tables  # the story's two tables: two MERGEs side by side
    for table in tables:
        quoted = _quote(layout.snapshot(source, table))
        twice = spark.sql(
            f"SELECT s.summary['{DELTA_PROPERTY}'] AS delta FROM {quoted}.`history` h "
            f"JOIN {quoted}.`snapshots` s ON h.snapshot_id = s.snapshot_id "
            f"WHERE h.is_current_ancestor AND s.summary['{DELTA_PROPERTY}'] IS NOT NULL "
            "GROUP BY 1 HAVING count(*) > 1").collect()
        assert not twice, (table, twice)
    assert ledger_resource(cfg).get().sealed_numbers(source)
