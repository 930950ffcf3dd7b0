"""encode_increment: what it writes is a complete increment that decodes back to the same rows."""

from __future__ import annotations

import datetime as dt

import pytest

from resources.codecs.backup import ChangelogRecord, decode_backup_key, iter_changelog, iter_rows
from resources.codecs.backup_writer import BackupWriteOptions, TableChanges, encode_increment
from resources.codecs.types import Column
from resources.prostore.completeness import IncrementLedger

CHANGELOG = [ChangelogRecord(0, "t", "CREATE TABLE dm.t (id bigint not null, at timestamp, d date, tm time, "
                                      "f float, PRIMARY KEY (id)) DISTRIBUTED BY (id)"),
             ChangelogRecord(1, "u", "CREATE TABLE dm.u (id int32 not null, v varchar, PRIMARY KEY (id)) "
                                      "DISTRIBUTED BY (id)")]
T = [Column("id", "bigint", nullable=False), Column("at", "timestamp"), Column("d", "date"), Column("tm", "time"),
     Column("f", "float")]
U = [Column("id", "int32", nullable=False), Column("v", "varchar")]


def _rows(n):
    return [{"id": i, "at": dt.datetime(2024, 1, 1, 0, 0, i % 60, 123456), "d": dt.date(2024, 1, 1 + i % 28),
             "tm": dt.time(1, 2, 3, i), "f": 0.5 * i, "sys_op": i % 2} for i in range(n)]


@pytest.mark.parametrize("numbering", ["stream", "table"])
@pytest.mark.parametrize("streams,partitions", [(1, 1), (3, 2)])
def test_an_increment_is_complete_and_decodes_to_its_rows(numbering, streams, partitions):
    rows_t, rows_u = _rows(23), [{"id": 7, "v": "ёлка", "sys_op": 0}]
    opts = BackupWriteOptions(chunk_size=5, streams=streams, partitions=partitions, numbering=numbering)
    msgs = encode_increment("dm", 4, 1_700_000_000_000_000, "inc-1", CHANGELOG,
                            {"t": TableChanges(T, rows_t), "u": TableChanges(U, rows_u), "empty": TableChanges(U, [])},
                            opts)
    assert len(msgs) == 1 + 5 + 1  # changelog, 23 rows in chunks of 5, one chunk of u; none for "empty"
    assert {m.partition for m in msgs} == set(range(min(streams, partitions)))
    ledger = IncrementLedger()
    for offset, m in enumerate(msgs):
        ledger.add(decode_backup_key(m.key), m.partition, offset, 0)
    report = ledger.report().datamarts["dm"].deltas[4]
    assert report.complete and report.chosen == "inc-1" and report.delta_date == 1_700_000_000_000_000
    keys = [decode_backup_key(m.key) for m in msgs]
    assert keys[0].table_name is None and keys[0].stream_number == 1 and keys[0].chunk_number == 1
    assert list(iter_changelog(msgs[0].value)) == CHANGELOG
    back = [r for m in msgs if m.table == "t" for r in iter_rows(m.value, T)]
    assert sorted(back, key=lambda r: r["id"]) == [{**r, "f": float(r["f"])} for r in rows_t]
    assert [r for m in msgs if m.table == "u" for r in iter_rows(m.value, U)] == rows_u


def test_the_same_sync_markers_give_the_same_bytes():
    def seeded():
        n = iter(range(10**6))
        return lambda: next(n).to_bytes(16, "big")

    one = encode_increment("dm", 0, 0, "i", CHANGELOG, {"t": TableChanges(T, _rows(3))}, sync=seeded())
    two = encode_increment("dm", 0, 0, "i", CHANGELOG, {"t": TableChanges(T, _rows(3))}, sync=seeded())
    assert [(m.key, m.value) for m in one] == [(m.key, m.value) for m in two]


def test_options_are_checked():
    with pytest.raises(ValueError, match="chunk_size"):
        BackupWriteOptions(chunk_size=0)
    with pytest.raises(ValueError, match="codec"):
        BackupWriteOptions(codec="zstd")
