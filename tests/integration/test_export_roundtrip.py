"""`deltaport export` round trips: lake A -> BACKUP_TO_KAFKA topic -> lake B equals lake A.

Real broker, real Spark, real Iceberg. Lake A lands the emulator's traffic (every column type,
a new table, a view, a column added, renamed and dropped) from signal and backup topics. Each
datamart is exported (2 streams, 2 partitions, small chunks) to a topic of its own; `inspect`
finds every delta complete and no bad message; lake B lands those topics alone (backup-only
sources) and equals A, and the emulator's truth, as of every delta. A snapshot export of depth 2
bootstraps lake C, whose deltas last-2..last equal A's; a second snapshot into the same topic
is refused.
"""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest
import yaml

from platform_assets.cli import main
from platform_assets.config import parse_config
from platform_assets.engine import engine_for
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.kafka.publish import publish
from resources.emulator.scenario import EmulatorConfig, build_scenario
from resources.emulator.stream_oracle import row_diff, same_rows
from resources.errors import DeltaportError
from resources.kafka.admin import create_topic
from resources.lake.layout import LakeLayout
from resources.lake.read import rows_as_of

pytestmark = pytest.mark.integration

DMS = ("marketing", "sourcedb")


def _config(tmp_path, name, kafka_bootstrap, sources):
    raw = {"sources": sources, "kafka": {"bootstrap_servers": kafka_bootstrap},
           "lake": {"catalog": name, "warehouse": str(tmp_path / name / "lake")},
           "state_dir": str(tmp_path / name / "state"), "sensor": {"max_deltas_per_run": 10}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return parse_config(raw), str(path)


def _inspect(topic, kafka_bootstrap, capsys) -> dict:
    capsys.readouterr()
    assert main(["inspect", "--topic", topic, "-b", kafka_bootstrap, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _truth(sc, dm, n, table):
    key = sc.databases[dm].tables[table].primary_key
    return sorted(sc.truth[dm][n][table].values(), key=lambda r: tuple(r[k] for k in key))


def _landed(cfg) -> list[tuple[str, int]]:
    with dg.instance_for_test() as instance:
        result = sync(cfg, instance, echo=lambda line: None)
    assert result.ok, result.waiting
    return result.landed()


def test_an_exported_lake_lands_again_as_the_same_tables(spark_remote, kafka_bootstrap, tmp_path, capsys):
    sc = build_scenario(EmulatorConfig(seed=31, deltas=4, datamarts=DMS, rows_per_delta=8, ddl_at_delta=2,
                                       column_changes_at_delta=1))
    tag = os.getpid()
    topics = {"signal": f"rt-signal.{tag}", "backup": f"rt-backup.{tag}"}
    for t in topics.values():
        create_topic(kafka_bootstrap, t)
    publish(sc.messages, kafka_bootstrap, {SIGNAL: topics["signal"], BACKUP: topics["backup"]})
    cfg_a, file_a = _config(tmp_path, "rt_a", kafka_bootstrap, [
        {"name": dm, "format": "prostore", "backup_topic": topics["backup"], "signal_topic": topics["signal"]}
        for dm in DMS])
    deltas = {dm: sorted(sc.truth[dm]) for dm in DMS}
    assert sorted(_landed(cfg_a)) == sorted((dm, n) for dm in DMS for n in deltas[dm])

    exported = {dm: f"rt-export.{dm}.{tag}" for dm in DMS}
    for dm in DMS:
        assert main(["export", dm, "--topic", exported[dm], "-c", file_a, "--chunk-size", "4", "--streams", "2",
                     "--partitions", "2"]) == 0
        doc = _inspect(exported[dm], kafka_bootstrap, capsys)
        (report,) = doc["backup"]["datamarts"]
        assert report["complete"] == deltas[dm] and report["incomplete"] == [] and report["missing_deltas"] == []
        assert doc["bad_messages"] == 0 and doc["partitions"].keys() == {"0", "1"}
    # Run again, it appends only what the topic lacks: nothing (the seed's "all new deltas").
    assert main(["export", "marketing", "--topic", exported["marketing"], "-c", file_a]) == 0
    assert "nothing to export" in capsys.readouterr().out

    cfg_b, _ = _config(tmp_path, "rt_b", kafka_bootstrap, [
        {"name": dm, "format": "prostore", "backup_topic": exported[dm]} for dm in DMS])
    assert sorted(_landed(cfg_b)) == sorted((dm, n) for dm in DMS for n in deltas[dm])

    # Lake A equals the truth at every delta (tests/integration/test_platform.py), so B equal to
    # the truth is B equal to A.
    lake_b, b = engine_for(cfg_b).session(), LakeLayout(cfg_b.lake.catalog)
    for dm in DMS:
        for n in deltas[dm]:
            for table in sc.truth[dm][n]:
                assert rows_as_of(lake_b, b, dm, table, n) == _truth(sc, dm, n, table), f"lake B {dm}.{table} as of {n}"

    # A snapshot backup of depth 2: A's state as of last - 2 as delta 0, then two deltas.
    dm, last = "marketing", deltas["marketing"][-1]
    snap = f"rt-snapshot.{tag}"
    assert main(["export", dm, "--topic", snap, "--snapshot-depth", "2", "-c", file_a]) == 0
    report = _inspect(snap, kafka_bootstrap, capsys)["backup"]["datamarts"][0]
    assert report["complete"] == [0, 1, 2] and report["incomplete"] == []
    assert main(["export", dm, "--topic", snap, "--snapshot-depth", "1", "-c", file_a]) == 2
    assert "a snapshot goes to a topic of its own" in capsys.readouterr().err

    # Lake C starts from that snapshot (bootstrap: its last delta is A's last) and goes on with
    # the exported increments after it (none yet): deltas last-2..last, each equal to A's.
    cfg_c, _ = _config(tmp_path, "rt_c", kafka_bootstrap, [{
        "name": dm, "format": "prostore", "backup_topic": exported[dm], "bootstrap": {"topic": snap, "last_delta": last}}])
    assert _landed(cfg_c) == [(dm, n) for n in range(last - 2, last + 1)]
    lake_c, c = engine_for(cfg_c).session(), LakeLayout(cfg_c.lake.catalog)
    for n in range(last - 2, last + 1):
        for table in sc.truth[dm][n]:
            assert rows_as_of(lake_c, c, dm, table, n) == _truth(sc, dm, n, table), f"lake C {table} as of delta {n}"


def test_an_exported_change_stream_lands_as_a_datamart_with_the_streams_states(spark_remote, kafka_bootstrap,
                                                                               tmp_path, capsys):
    """A Qlik stream (partial updates, duplicates, a rollback, a column added) landed, exported as
    a Prostore datamart, landed again backup-only: every table as of every delta holds the
    stream's own state, decimals as their exact text; a snapshot export of it bootstraps a lake
    at its last deltas."""
    from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
    from resources.lake.cdc import cdc_landed_deltas, cdc_rows_as_of
    from resources.lake.stream_export import prostore_value

    # 12 transactions: the rollback (5th) and the column added (10th) are in
    story = build_qlik_story(QlikConfig(seed=11, transactions=12, duplicate_rate=0.15))
    tag = os.getpid()
    topic, exported = f"rt-qlik.{tag}", f"rt-qlik-export.{tag}"
    create_topic(kafka_bootstrap, topic)
    publish(story.messages, kafka_bootstrap, {QLIK: topic})
    cfg_s, file_s = _config(tmp_path, "rt_s", kafka_bootstrap, [
        {"name": "src", "format": "qlik", "topic": topic, "max_rows": 20, "max_seconds": 3600, "idle_seconds": 0}])
    assert _landed(cfg_s)
    assert main(["export", "src", "--topic", exported, "-c", file_s, "--chunk-size", "5"]) == 0
    report = _inspect(exported, kafka_bootstrap, capsys)["backup"]["datamarts"][0]
    stream_lake, s = engine_for(cfg_s).session(), LakeLayout(cfg_s.lake.catalog)
    deltas = sorted(cdc_landed_deltas(stream_lake, s, "src"))
    assert report["complete"] == deltas and report["incomplete"] == []

    cfg_p, _ = _config(tmp_path, "rt_p", kafka_bootstrap, [{"name": "src", "format": "prostore",
                                                            "backup_topic": exported}])
    assert _landed(cfg_p) == [("src", n) for n in deltas]
    prostore_lake, p = engine_for(cfg_p).session(), LakeLayout(cfg_p.lake.catalog)
    tables = [t.tableName for t in stream_lake.sql(f"SHOW TABLES IN {s.catalog}.src").collect()]

    def compare(lake, layout, numbers) -> int:
        compared = 0
        for n in numbers:
            for table in tables:
                try:
                    want = cdc_rows_as_of(stream_lake, s, "src", table, n)
                except DeltaportError:
                    continue  # the table has no state yet at delta n
                types = {f.name: f.dataType for f in stream_lake.table(s.snapshot("src", table)).schema.fields}
                want = [{c: prostore_value(types[c], v) for c, v in r.items()} for r in want]
                got = rows_as_of(lake, layout, "src", table, n)
                assert same_rows(got, want), f"{layout.catalog} {table} as of delta {n}: {row_diff(got, want)}"
                compared += 1
        return compared

    assert compare(prostore_lake, p, deltas) >= len(deltas) >= 3, deltas

    # A snapshot export of the stream (depth 1) bootstraps a lake at its last two deltas.
    snap, last = f"rt-qlik-snapshot.{tag}", deltas[-1]
    assert main(["export", "src", "--topic", snap, "--snapshot-depth", "1", "-c", file_s]) == 0
    assert _inspect(snap, kafka_bootstrap, capsys)["backup"]["datamarts"][0]["complete"] == [0, 1]
    cfg_b, _ = _config(tmp_path, "rt_sb", kafka_bootstrap, [{"name": "src", "format": "prostore",
                                                             "backup_topic": exported,
                                                             "bootstrap": {"topic": snap, "last_delta": last}}])
    assert _landed(cfg_b) == [("src", last - 1), ("src", last)]
    assert compare(engine_for(cfg_b).session(), LakeLayout(cfg_b.lake.catalog), [last - 1, last]) >= 2
