"""A plain-Python reader of backup traffic, for tests: decode, choose increments, apply them.

It is the simplest correct consumer of the format (no Kafka, no Spark), so the emulator, the
codecs and the completeness rules can be checked against each other before the lake exists.
"""

from __future__ import annotations

from collections.abc import Iterable

from resources.codecs.backup import MESSAGE_TYPE_CHANGELOG, decode_backup_key, iter_changelog, iter_rows
from resources.codecs.ddl import replay_changelog
from resources.prostore.completeness import IncrementLedger
from resources.errors import DecodeError


def chosen_increments(messages: Iterable[tuple[int, int, bytes, bytes]]):
    """messages: (partition, offset, key, value). Returns ({(dm, delta): [(key, value)]}, ledger report)."""
    ledger = IncrementLedger()
    bodies: dict[tuple, bytes] = {}
    for partition, offset, key_bytes, value in messages:
        try:
            key = decode_backup_key(key_bytes)
            if key.message_type == MESSAGE_TYPE_CHANGELOG:
                list(iter_changelog(value))
            else:
                list(iter_rows(value))
        except DecodeError:
            continue
        if ledger.add(key, partition, offset, offset):
            bodies[key] = value
    report = ledger.report()
    out = {}
    for dm, dm_report in report.datamarts.items():
        for n, delta in dm_report.deltas.items():
            if delta.chosen is not None:
                out[(dm, n)] = [(k, v) for k, v in bodies.items()
                                if k.datamart == dm and k.delta_num == n and k.increment_id == delta.chosen]
    return out, report


def apply_increment(state: dict[str, dict[tuple, dict]], parts: list) -> dict[str, dict[tuple, dict]]:
    """State N-1 + increment N -> state N (upsert on sys_op 0, delete on 1, by the DDL's key)."""
    changelog = next(list(iter_changelog(v)) for k, v in parts if k.message_type == MESSAGE_TYPE_CHANGELOG)
    entities = replay_changelog(changelog)
    new = {name: dict(rows) for name, rows in state.items() if name in entities}
    for name, entity in entities.items():
        if entity.kind == "table":
            new.setdefault(name, {})
    for key, value in sorted(parts, key=lambda kv: (kv[0].stream_number, kv[0].chunk_number)):
        if key.message_type == MESSAGE_TYPE_CHANGELOG:
            continue
        entity = entities[key.table_name]
        for row in iter_rows(value, entity.columns):
            op = row.pop("sys_op")
            pk = tuple(row[c] for c in entity.primary_key)
            if op == 1:
                new[key.table_name].pop(pk, None)
            else:
                new[key.table_name][pk] = row
    return new
