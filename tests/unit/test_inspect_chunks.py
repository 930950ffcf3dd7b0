"""`inspect` checks each chunk against its increment's changelog, as `sync` does before a delta is
due: a chunk without a key column is a located bad message and a hole (the emulator's story of
test_chunk_check.py: delta 2's changelog creates `returns`, key id, sale_id)."""

from __future__ import annotations

from dataclasses import replace

from bench.fault_bad_chunk import spoil
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, build_scenario
from resources.kafka.scan import RawMessage
from resources.prostore.inspect import TopicInspector

DM, BAD = "marketing", 2


def _story():
    sc = build_scenario(EmulatorConfig(seed=11, deltas=4, datamarts=(DM,), cancel_rate=0.0, ddl_at_delta=BAD))
    backups = [m for m in sc.messages if m.role == BACKUP]
    victim = next(m for m in backups if m.note.startswith(f"{DM}:{BAD}:") and ":returns:" in m.note)
    return backups, victim, sum(1 for ch in sc.increments[DM][BAD] if ch.table == "returns")


def inspect(messages):
    inspector = TopicInspector("t")
    for offset, m in enumerate(messages):
        inspector.add(RawMessage("t", 0, offset, 1_700_000_000_000 + offset, m.key, m.value))
    return inspector.report()


def test_a_chunk_without_a_key_column_is_flagged_and_a_hole():
    backups, victim, _ = _story()
    spoilt = replace(victim, value=spoil(victim.value, "chunk-without-key-column"))
    messages = [spoilt if m is victim else m for m in backups]
    report = inspect(messages)
    assert dict(report.errors_by_kind) == {"missing_key_column": 1}
    (err,) = report.errors
    assert err.location.offset == messages.index(spoilt) and err.part == "value"
    assert "lacks primary key column(s) 'sale_id' (key: id, sale_id)" in str(err)
    deltas = report.backup.datamarts[DM]
    assert deltas.incomplete == [BAD] and deltas.complete == [0, 1, 3]
    # The changelog after the data (another partition read first): the same answer.
    late = [m for m in messages if ":<changelog>:" not in m.note] + [m for m in messages if ":<changelog>:" in m.note]
    again = inspect(late)
    assert dict(again.errors_by_kind) == {"missing_key_column": 1} and again.backup.datamarts[DM].incomplete == [BAD]


def test_a_good_copy_of_the_chunk_keeps_the_delta_complete():
    backups, victim, rows = _story()
    spoilt = replace(victim, value=spoil(victim.value, "chunk-without-key-column"))
    report = inspect([spoilt if m is victim else m for m in backups] + [victim])
    assert dict(report.errors_by_kind) == {"missing_key_column": 1}
    assert report.backup.datamarts[DM].incomplete == []
    assert report.rows[(DM, BAD, "returns")] == rows  # counted once, from the good copy
