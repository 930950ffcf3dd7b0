"""A delta's quarantined backup messages: kept with their delta by the index, counted and named by
the increment's `no_quarantined_messages` check (resources/prostore/delta_index.py,
platform_assets/prostore/checks.py). A real SQLite delta index, no broker."""

from __future__ import annotations

import dagster as dg

from platform_assets.prostore.checks import QUARANTINE, quarantine_check
from resources.codecs.backup import BackupKey
from resources.errors import BadMessage
from resources.prostore.delta_index import _MIGRATIONS, BackupEntry, DeltaIndex
from resources.state.store import StateStore

TOPIC, DM = "prostore.backup", "marketing"


def entry(offset: int, delta: int) -> BackupEntry:
    key = BackupKey("inc-1", 1, DM, delta, 1_700_000_000_000_000, "sales", 1, 1, 1, True)
    return BackupEntry(0, offset, 1_700_000_000_000, key, 10)


def test_a_bad_copy_and_a_refused_chunk_count_for_their_delta(tmp_path):
    index = DeltaIndex(tmp_path / "index.sqlite")
    index.write_batch(TOPIC, backup=[entry(0, 3), entry(1, 4)], bad=[
        BadMessage(0, 2, "value", "bad_container_file", "truncated", DM, 3),  # a bad copy: its key named delta 3
        BadMessage(0, 3, "key", "bad_avro_key", "not avro"),  # no key: no delta
        BadMessage(0, 4, "value", "bad_container_file", "truncated", "other", 3),  # another datamart's
    ], next_offsets={0: 5})
    # A chunk quarantined after it was indexed (chunk_check): its delta comes from the indexed key.
    index.write_batch(TOPIC, bad=[BadMessage(0, 1, "value", "missing_key_column", "no key")], next_offsets={})
    got = index.delta_quarantine(TOPIC, DM, 3, 4)
    assert {n: [(q["offset"], q["kind"]) for q in qs] for n, qs in got.items()} == {
        3: [(2, "bad_container_file")], 4: [(1, "missing_key_column")]}
    assert index.delta_quarantine(TOPIC, DM, 5, 9) == {} and index.delta_quarantine("other.topic", DM, 0, 9) == {}


def test_an_index_quarantined_before_it_kept_deltas_migrates(tmp_path):
    store = StateStore(tmp_path / "index.sqlite")
    assert store.migrate("delta_index", _MIGRATIONS[:3]) == 3
    with store.transaction("delta_index") as db:
        db.execute("INSERT INTO quarantine VALUES (?,?,?,?,?,?)", (TOPIC, 0, 7, "value", "bad_container_file", "x"))
    index = DeltaIndex(tmp_path / "index.sqlite")
    assert [q["offset"] for q in index.quarantine(TOPIC)] == [7]
    assert index.delta_quarantine(TOPIC, DM, 0, 100) == {}  # its delta is not known: not counted for any


def test_the_check_warns_and_names_topic_partition_and_offset():
    key = dg.AssetKey([DM, "increment"])
    clean = quarantine_check(TOPIC, {}, key=key)
    assert clean.passed and clean.check_name == QUARANTINE
    bad = quarantine_check(TOPIC, {4: [{"partition": 2, "offset": 17, "part": "value", "kind": "bad_container_file",
                                        "reason": "truncated"}]}, key=key)
    assert not bad.passed and bad.severity == dg.AssetCheckSeverity.WARN
    assert bad.description == "delta 4: bad_container_file at topic 'prostore.backup' partition 2 offset 17"
    assert bad.metadata["bad_messages"].value == 1
