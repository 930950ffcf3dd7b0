"""The Dagster peer bench's pure helpers (bench/dagster_peer_bench.py): the offsets its peer is
given from what was published, and the medians it reports."""

from __future__ import annotations

from bench.dagster_peer_bench import published_ranges, report_line, summarize
from resources.codecs.backup import BackupKey, MESSAGE_TYPE_CHANGELOG, MESSAGE_TYPE_DATA, encode_backup_key
from resources.emulator.outgoing import BACKUP, SIGNAL, Outgoing


def _backup(partition: int, table: str | None, chunk: int = 1) -> Outgoing:
    kind = MESSAGE_TYPE_DATA if table else MESSAGE_TYPE_CHANGELOG
    key = BackupKey("inc-1", kind, "marketing", 3, 0, table, 1, 1, chunk, True)
    return Outgoing(BACKUP, partition, encode_backup_key(key), b"")


def test_published_ranges_give_each_tables_data_offsets_from_the_partitions_next_offsets():
    messages = [Outgoing(SIGNAL, 0, b"k", b"v"),  # another topic: no offset of the backup topic
                _backup(0, None),  # the changelog: offset 10 of partition 0, no table's
                _backup(0, "a"), _backup(1, "b"), _backup(0, "a", 2), _backup(1, "a")]
    assert published_ranges(messages, {0: 10, 1: 4}) == {"a": {0: (11, 13), 1: (5, 6)}, "b": {1: (4, 5)}}


def _entry(ours: float, peer: float, floor: float, files: int, rows: int = 10) -> dict:
    kinds = {"data": files, "manifests": 1, "metadata_json": 1, "other": 0}
    return {"delta": 0, "rows": rows, "seconds": {"ours": ours, "peer": peer, "floor": floor},
            "step_seconds": {"ours": ours / 2, "peer": peer / 2, "floor": floor / 2},
            "files": {"ours": kinds, "peer": {**kinds, "data": 1}}, "equal": True}


def test_summarize_leaves_out_deltas_without_rows_and_the_first_with_rows_and_sets_ours_and_the_peer_against_the_floor():
    deltas = [_entry(9.0, 0.5, 0.5, 9, rows=0), _entry(30.0, 20.0, 5.0, 99), _entry(3.0, 2.0, 1.0, 4),
              _entry(1.0, 0.5, 0.5, 0, rows=0), _entry(5.0, 3.0, 1.0, 4), _entry(4.0, 2.0, 0.5, 6)]
    sm = summarize(deltas)
    assert (sm["ours_s"], sm["peer_s"], sm["floor_s"]) == (4.0, 2.0, 1.0)
    assert (sm["ours_minus_floor_s"], sm["peer_minus_floor_s"]) == (3.5, 1.5)
    assert (sm["ours_around_step_s"], sm["floor_around_step_s"]) == (2.0, 0.5)
    # ours / peer: the median of each delta's ratio (1.5, 1.67, 2); beyond the floor: of the medians
    assert sm["ours_over_peer"] == 1.67 and sm["ours_over_peer_beyond_floor"] == 2.33
    assert (sm["ours_files"], sm["peer_files"], sm["files_ours_over_peer"]) == (6, 3, 2.0)
    assert sm["all_equal"] and "median of 3): ours 4.0 s, peer 2.0 s, floor 1.0 s" in report_line(sm)
    deltas[0]["equal"] = False  # a delta left out of the medians is still checked
    assert not summarize(deltas)["all_equal"]
