"""End to end per change-stream format: emulator -> real Kafka -> sealing sensor -> runs -> Iceberg.

For Qlik Replicate, DataWorks and Datastream: the format's emulated story (duplicates, split
updates, heartbeats, out-of-order backfill, a rolled-back transaction, a DDL change) plus bad
messages is published in two halves. Sealing-sensor ticks go through `build_sensor_context` on a
`dg.instance_for_test()` and the requested runs are executed in process (changelog, increment,
snapshot). Between the halves the platform "restarts": new Definitions and resources on the same
state folder and lake. After every run, each snapshot table as of the delta equals the story's
truth for what the sealed deltas hold (resources/emulator/stream_oracle.py), row for row.
At the end: every sealed delta landed once, in order; the checks passed; the bad messages are
quarantined with their coordinates; the final state is the story's final state; re-running a
partition changes nothing.
"""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions, ledger_resource
from platform_assets.deltas.partitions import partition_key
from platform_assets.deltas.requests import request_deltas
from resources.emulator.datastream import DATASTREAM, DatastreamConfig, build_datastream_story
from resources.emulator.dataworks import ROLE as DATAWORKS, DataWorksConfig, build_dataworks_story
from resources.emulator.outgoing import Outgoing
from resources.kafka.publish import publish
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.emulator.stream_oracle import final_truth, row_diff, same_rows, truth_after
from resources.errors import DecodeError
from resources.kafka.admin import create_topic
from resources.lake.cdc import cdc_rows_as_of
from resources.lake.layout import LakeLayout
from resources.changestream.sealing import read_delta

pytestmark = pytest.mark.integration

SOURCE = "src"


def qlik_case():
    story = build_qlik_story(QlikConfig(seed=11, transactions=24, duplicate_rate=0.15))
    body = json.loads(next(m for m in story.messages if m.note.startswith("DT:INSERT")).value)
    bad = [
        (9, b'{"schema": "SALES", "headers": {', "qlik_bad_json"),
        (25, json.dumps({**body, "headers": {**body["headers"], "operation": "MERGE"}}).encode(),
         "qlik_unknown_operation"),
        (40, json.dumps({**body, "headers": {**body["headers"], "columnMask": "ZZ"}}).encode(), "qlik_bad_mask"),
    ]
    return story, bad, {"max_rows": 18, "max_seconds": 3600}


def dataworks_case():
    story = build_dataworks_story(DataWorksConfig(seed=5, transactions=30, failover_rate=0.3))
    doc = json.loads(next(m for m in story.messages if "INSERT" in m.note).value)
    bad = [
        (12, b'{"schema": {"dataColumn": [', "dataworks_bad_json"),
        (50, b'{"payload": {}}', "dataworks_bad_envelope"),
        (90, json.dumps({**doc, "payload": {**doc["payload"], "op": "UPSERT"}}).encode(), "dataworks_unknown_op"),
    ]
    return story, bad, {"max_rows": 24, "max_seconds": 90}


def datastream_case():
    story = build_datastream_story(DatastreamConfig(seed=3, steps=90, fmt="avro", duplicate_rate=0.1))
    bad = [(20, b'{"uuid": "1", ', "bad_avro"), (70, b'{"read_method": "mysql-cdc-binlog"}', "bad_avro")]
    limits = {"max_rows": 40, "max_seconds": 60, "lateness_seconds": story.max_lateness_us / 1e6}
    return story, bad, limits


CASES = {QLIK: qlik_case, DATAWORKS: dataworks_case, DATASTREAM: datastream_case}


def with_bad_messages(story, role, bad) -> tuple[list[Outgoing], dict[tuple[int, int], str]]:
    """The story's messages with the bad ones inserted (one partition: offset = position)."""
    out = list(story.messages)
    for pos, value, note in sorted(bad):
        out.insert(pos, Outgoing(role, 0, b"bad", value, note))
    return out, {(0, pos): note for pos, _, note in bad}


def platform(kafka_bootstrap, tmp_path, fmt, topic, limits, idle):
    cfg = parse_config({
        "sources": [{"name": SOURCE, "format": fmt, "topic": topic, "idle_seconds": idle, **limits}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": f"streams_{fmt}", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_messages_per_tick": 60, "max_deltas_per_run": 3},  # single and range runs
    })
    return cfg, build_definitions(cfg)


def tick(defs, instance, cursor):
    sensor = defs.resolve_sensor_def(f"{SOURCE}_seal_sensor")
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs, resources=defs.resources) as ctx:
        result = sensor(ctx)
    for req in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    return result


def lake_state(spark, layout, n, tables):
    return {t: cdc_rows_as_of(spark, layout, SOURCE, t, n) for t in tables}


@pytest.mark.parametrize("fmt", [QLIK, DATAWORKS, DATASTREAM])
def test_snapshots_equal_the_oracle_at_every_sealed_delta(spark_remote, kafka_bootstrap, tmp_path, fmt):
    story, bad, limits = CASES[fmt]()
    role = fmt  # the emulators' Outgoing role is the format's name
    messages, expected_bad = with_bad_messages(story, role, bad)
    topic = f"e2e.{fmt}.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    half = len(messages) // 2
    publish(messages[:half], kafka_bootstrap, {role: topic})

    records: list = []  # decoded records of the landed deltas, in delta order
    observed: list = []  # the topic's observations, as the sensor reported them
    landed: list[int] = []
    compared = 0
    cursor = None
    with dg.instance_for_test() as instance:
        # Two lives of the platform on one state folder and lake: the second one (a restart)
        # sees the second half of the traffic and flushes the quiet tail (idle_seconds 0).
        for life, idle in ((0, 3600), (1, 0)):
            cfg, defs = platform(kafka_bootstrap, tmp_path, fmt, topic, limits, idle)
            layout = LakeLayout(cfg.lake.catalog)
            spark = defs.resources["spark"].get_session()  # catalogs are per session: the platform's own
            ledger = ledger_resource(cfg).get()
            job = defs.resolve_job_def(f"{SOURCE}_delta_job")
            quiet = 0
            while quiet < 2:
                result = tick(defs, instance, cursor)
                cursor = result.cursor
                observed += [e for e in result.asset_events or [] if e.asset_key.path[0] == "kafka"]
                quiet = 0 if result.run_requests else quiet + 1
                for req in result.run_requests:
                    deltas = request_deltas(req)
                    assert deltas[0] == len(landed) and len(deltas) <= 3, (req.run_key, landed)
                    assert job.execute_in_process(partition_key=req.partition_key, instance=instance,
                                                  tags=req.tags).success
                    for n in deltas:  # exact as of every delta, single or inside a range run
                        landed.append(n)
                        delta = ledger.delta(SOURCE, n)
                        records += [r for _, rs in read_delta(kafka_bootstrap, ledger, SOURCE, n, fmt, timeout=20)
                                    if not isinstance(rs, DecodeError) for r in rs]
                        truth = truth_after(fmt, story, records, delta.watermark_us)
                        if truth is None:
                            continue
                        got = lake_state(spark, layout, n, [t for t, rows in truth.items() if rows])
                        for table, rows in truth.items():
                            if rows or table in got:
                                diff = row_diff(got.get(table, []), rows)
                                assert not any(diff.values()), f"{fmt} {table} as of delta {n}: {diff}"
                        compared += 1
            if life == 0:
                assert landed, "the first half seals and lands deltas"
                publish(messages[half:], kafka_bootstrap, {role: topic})

        deltas = ledger.sealed_deltas(SOURCE)
        assert landed == [d.delta_num for d in deltas] and len(landed) >= 4, landed
        print(f"{fmt}: {len(landed)} deltas landed, {compared} compared with the oracle")
        assert compared >= 3, f"only {compared} deltas compared"
        # The idle flush sealed the tail up to its last boundary: what is left cannot end a delta
        # (late duplicates, a bad message), and the final state below shows nothing was lost.
        tail = [m for ms in ledger.tail(SOURCE).marks.values() for m in ms]
        assert all(m.kind == "none" for m in tail) and len(tail) < 10, tail
        # Bad messages: quarantined with their coordinates, the good ones landed around them.
        got_bad = {(q["partition"], q["offset"]): q["kind"] for q in ledger.quarantine(SOURCE)}
        assert set(got_bad) == set(expected_bad) and all(q["topic"] == topic for q in ledger.quarantine(SOURCE))
        assert observed[-1].metadata["bad_messages"].value == len(expected_bad)  # the topic's page counts them
        # Each increment partition lists the tables its delta changed, with the rows it changed there.
        for mat in instance.fetch_materializations(dg.AssetKey([SOURCE, "increment"]), limit=100).records:
            meta = mat.asset_materialization.metadata
            listed = {r.data["table"]: r.data["rows"] for r in meta["tables"].records}
            assert listed == {layout.increment(SOURCE, k[len("rows/"):]): v.value for k, v in meta.items()
                              if k.startswith("rows/") and v.value}, mat.partition_key
        # The final state is the story's.
        last = landed[-1]
        final = final_truth(fmt, story)
        for table, rows in final.items():
            assert same_rows(cdc_rows_as_of(spark, layout, SOURCE, table, last), rows), f"final {table}"
        for name, key in (("increment_complete", [SOURCE, "increment"]), ("key_unique", [SOURCE, "snapshot"])):
            ev = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(dg.AssetKey(key), name))
            assert ev is not None and ev.evaluation.passed, name
        # Re-running a landed partition changes nothing.
        tables = [t for t, rows in final.items() if rows]
        before = lake_state(spark, layout, last, tables)
        assert job.execute_in_process(partition_key=partition_key(landed[len(landed) // 2]),
                                      instance=instance).success
        assert lake_state(spark, layout, last, tables) == before
        # A delta the ledger has not sealed fails its run, saying so; nothing is written.
        future = partition_key(last + 5)
        instance.add_dynamic_partitions(f"{SOURCE}_deltas", [future])
        res = job.execute_in_process(partition_key=future, instance=instance, raise_on_error=False)
        failure = next(e for e in res.all_events if e.is_step_failure)
        assert not res.success and f"delta {last + 5} of source {SOURCE!r} is not sealed" in \
            failure.event_specific_data.error.message
        assert lake_state(spark, layout, last, tables) == before
