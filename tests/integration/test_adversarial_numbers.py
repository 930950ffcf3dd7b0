"""Issue 31: a message claiming numbers no writer sends costs bounded memory and time, is
quarantined with its coordinates, and the good exports after it still land.

Real broker, real Spark, real Iceberg. The first test is the fault suite's `numbers` case
(bench/fault_numbers.py): a backup and a signal topic of 1000 messages each, adversarial numbers
in every numeric field; `deltaport inspect --json` and the sensor's reading code (`ingest_topic`
and completeness, tick after tick, as `sync` runs it) each in a child process under RLIMIT_AS
2 GiB. Before the fix the backup inspect died of MemoryError in `_gaps` (completeness.py: every
chunk number below 2^63 - 1 enumerated) and the ingest of the signal topic of OverflowError (a
20-digit deltaNum into the index's 64-bit column) and ValueError (a 5000-digit one).
The second lands a backup-only datamart from such a topic with `sync`: every delta equals the
emulator's truth, each from its good export, and the refused keys are in the quarantine.
The third is the fault suite's case per change-stream format (bench/fault_stream_numbers.py):
extreme numbers in the story's JSON messages, read by the sealer under the same cap; nothing
crashes (before: ValueError, OverflowError, RecursionError out of the codecs), no good message
is quarantined, what is accepted can be landed, and sealing goes on (a DataWorks sequenceId of
10^20 had stopped it for good).
"""

from __future__ import annotations

import random
import uuid

import dagster as dg
import pytest

from bench.fault_numbers import LIMIT_MIB, run_numbers_case
from bench.fault_stream_numbers import STREAM_FORMATS, run_stream_numbers_case
from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.sync import sync
from tests.support.adversarial import REFUSED, adversarial_numbers
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from resources.lake.layout import LakeLayout
from resources.lake.read import rows_as_of
from resources.prostore.delta_index import DeltaIndex
from resources.state.store import StateStore

pytestmark = pytest.mark.integration

DM = "marketing"


def test_inspect_and_ingest_of_adversarial_numbers_stay_bounded(kafka_bootstrap, tmp_path):
    row = run_numbers_case(kafka_bootstrap, tmp_path, seed=5, total=1000)
    assert not row.problems, row.problems
    assert row.produced == {"backup": 1000, "signal": 1000}
    for role, run in row.inspect.items():
        assert run["peak_mib"] < LIMIT_MIB, (role, run)
    assert row.ingest["peak_mib"] < LIMIT_MIB, row.ingest
    assert row.refused["backup"] > 100 and row.refused["signal"] > 100, row.refused
    assert row.refused_quarantined == row.quarantined == sum(row.refused.values()) and row.good_quarantined == 0, row
    assert row.deltas_due == row.deltas > 0 and row.survived


def test_sync_lands_each_delta_from_its_good_export(spark_remote, kafka_bootstrap, tmp_path):
    sc = build_scenario(EmulatorConfig(seed=11, deltas=4, datamarts=(DM,), chunk_size=6, faults=Faults()))
    story = [m for m in sc.messages if m.role == BACKUP]
    messages = adversarial_numbers(story, 300, random.Random(11))
    assert messages[0].note.startswith(REFUSED + " 0: {'chunk_number': 9223372036854775807, 'is_last_chunk': True")
    topic = f"numbers.sync.{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=1)
    publish(messages, kafka_bootstrap, {BACKUP: topic})

    cfg = parse_config({
        "sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "lake": {"catalog": "numbers", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
        "sensor": {"max_messages_per_tick": 100},
    })
    with dg.instance_for_test() as instance:
        result = sync(cfg, instance, echo=lambda line: None)
    assert result.ok and result.landed() == [(DM, n) for n in sorted(sc.truth[DM])], result
    # An adversarial key within the limits names delta 10^9: it waits behind the gap, visibly.
    assert "(delta 1000000000 is)" in result.waiting[DM]

    spark = build_definitions(cfg).resources["spark"].get_session()
    layout = LakeLayout(cfg.lake.catalog)
    for n, tables in sc.truth[DM].items():
        for table, state in tables.items():
            keys = sc.databases[DM].tables[table].primary_key
            want = sorted(state.values(), key=lambda r: tuple(r[k] for k in keys))
            assert rows_as_of(spark, layout, DM, table, n) == want, f"{table} as of delta {n}"

    index = DeltaIndex(StateStore(tmp_path / "state" / "index.sqlite"))
    refused = {i for i, m in enumerate(messages) if m.note.startswith(REFUSED)}
    bad = index.quarantine(topic)
    assert {q["offset"] for q in bad} == refused and {q["kind"] for q in bad} == {"bad_key_number"}
    assert all(q["partition"] == 0 and q["part"] == "key" for q in bad)


@pytest.mark.parametrize("fmt", STREAM_FORMATS)
def test_the_sealer_of_adversarial_numbers_stays_bounded_and_goes_on(kafka_bootstrap, tmp_path, fmt):
    row = run_stream_numbers_case(kafka_bootstrap, fmt, tmp_path, seed=5, total=400)
    assert not row.problems, row.problems
    assert row.peak_mib < LIMIT_MIB and row.read == row.produced == 400, row
    assert row.quarantined > 100 and row.good_quarantined == row.without_location == 0, row
    assert row.accepted_unlandable == 0 and row.deltas >= row.story_deltas > 0 and row.survived, row
