"""Malformed messages for the emulator's `malformed` fault: one of each kind a reader must survive.

Each is inserted among good messages (never at the end only), so a test proves that one bad
message does not stop the ones after it. Backup faults reuse the key of a real data message
that was already sent, as a corrupted retry would: the good copy stays readable.
"""

from __future__ import annotations

import io
import json
import random
import zlib

import fastavro

from resources.emulator.outgoing import BACKUP, SIGNAL, Outgoing

# Kinds, as recorded in Scenario.injected["malformed"] and expected from readers' error counts.
SIGNAL_BAD_JSON_VALUE = "signal:bad_json_value"
SIGNAL_BAD_JSON_KEY = "signal:bad_json_key"
SIGNAL_NOT_A_KEY = "signal:not_a_signal_key"
SIGNAL_UNKNOWN_EVENT = "signal:unknown_event"  # not an error: kept as an unknown event
BACKUP_BAD_KEY = "backup:bad_avro_key"
BACKUP_TRUNCATED = "backup:truncated_container"
BACKUP_SCHEMA_MISMATCH = "backup:schema_mismatch"


def inject_malformed(sc, rng: random.Random) -> None:
    """Insert one malformed message of each kind into `sc.messages`, recording each."""
    msgs = sc.messages
    # Same partition as the datamart's good events, so per-datamart order stays checkable.
    sp = zlib.crc32(sc.config.datamarts[0].encode()) % sc.config.signal_partitions
    signal_key = json.dumps({"datamart": sc.config.datamarts[0], "datetime": "2024-02-28 09:00:00.1",
                             "event": "DELTA_OPEN", "eventLogId": "00000000-0000-4000-8000-00000000bad1"})
    made = [
        Outgoing(SIGNAL, sp, signal_key.encode(), b'{"deltaNum": 3', SIGNAL_BAD_JSON_VALUE),
        Outgoing(SIGNAL, sp, b'{"datamart": "marketing", "event": ', b"{}", SIGNAL_BAD_JSON_KEY),
        Outgoing(SIGNAL, sp, b'["not", "a", "signal", "key"]', b"{}", SIGNAL_NOT_A_KEY),
        Outgoing(SIGNAL, sp, signal_key.replace("DELTA_OPEN", "DELTA_MERGE").replace("bad1", "bad2").encode(),
                 b'{"deltaNum": 3, "mergedInto": 4}', SIGNAL_UNKNOWN_EVENT),
        Outgoing(BACKUP, 0, b"\x00\x01not avro at all\xff", b"Obj\x01", BACKUP_BAD_KEY),
    ]
    data_idx = [i for i, m in enumerate(msgs) if m.role == BACKUP and ":<changelog>:" not in m.note]
    if data_idx:
        victim = msgs[data_idx[len(data_idx) // 2]]
        made.append(Outgoing(BACKUP, victim.partition, victim.key, victim.value[: len(victim.value) // 2],
                             BACKUP_TRUNCATED + " of " + victim.note))
        made.append(Outgoing(BACKUP, victim.partition, victim.key, _mismatched_value(rng), BACKUP_SCHEMA_MISMATCH
                             + " of " + victim.note))
        first = data_idx[len(data_idx) // 2] + 1
    else:
        first = len(msgs) // 2
    for m in made:
        pos = rng.randint(min(first, len(msgs)), len(msgs))
        msgs.insert(pos, m)
        sc.record("malformed", m.role, m.note.split(" of ")[0])


def _mismatched_value(rng: random.Random) -> bytes:
    """A container file whose writer schema cannot be any emulated table's DDL."""
    schema = {"type": "record", "name": "row", "fields": [
        {"name": "id", "type": ["null", "string"]},  # every table's id is a number
        {"name": "no_such_column", "type": ["null", "double"]},
        {"name": "sys_op", "type": ["null", "int"]},
    ]}
    buf = io.BytesIO()
    # A seeded sync marker: the same seed gives the same bytes.
    fastavro.writer(buf, fastavro.parse_schema(schema), [{"id": "x", "no_such_column": 1.0, "sys_op": 0}],
                    sync_marker=rng.randbytes(16))
    return buf.getvalue()
