"""A delta's chunks checked against its own changelog before it is due (resources/prostore/chunk_check.py).

The emulator's messages go into a real delta index (SQLite) as ingest makes them (`_backup_entry`:
key, value check, schema kept), with no broker: the story's delta 2 creates `returns` (key id,
sale_id) in its own changelog and writes it in one chunk, which the cases spoil.
"""

from __future__ import annotations

import io
from dataclasses import replace

import fastavro
import pytest

from bench.fault_bad_chunk import spoil
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.scan import RawMessage
from resources.prostore.chunk_check import checked_report
from resources.prostore.delta_index import _MIGRATIONS, DeltaIndex
from resources.prostore.ingest import _backup_entry
from resources.state.store import StateStore

DM, TOPIC, BAD = "marketing", "backup", 2


@pytest.fixture(scope="module")
def story():
    sc = build_scenario(EmulatorConfig(seed=11, deltas=4, datamarts=(DM,), cancel_rate=0.0, ddl_at_delta=BAD,
                                       faults=Faults(reexport_deltas=(BAD,))))
    (_, _, again), = sc.injected["reexport"]
    backups = [m for m in sc.messages if m.role == BACKUP]
    held = [m for m in backups if m.note.startswith(f"{DM}:{BAD}:{again}:")]
    first = [m for m in backups if m not in held]
    victim = next(m for m in first if m.note.startswith(f"{DM}:{BAD}:") and ":returns:" in m.note)
    return first, held, victim


def index_of(tmp_path, messages, *, keep_schemas=True) -> DeltaIndex:
    index = DeltaIndex(tmp_path / "index.sqlite")
    add(index, messages, keep_schemas=keep_schemas)
    return index


def add(index: DeltaIndex, messages, *, keep_schemas=True) -> None:
    """Index `messages` after what the index holds, as one ingest batch."""
    start = index.progress(TOPIC).get(0, 0)
    entries = []
    for offset, m in enumerate(messages, start):
        entry = _backup_entry(RawMessage(TOPIC, 0, offset, 1_700_000_000_000 + offset, m.key, m.value))
        entries.append(entry if keep_schemas else replace(entry, schema=None))
    index.write_batch(TOPIC, backup=entries, next_offsets={0: start + len(messages)})


def with_value(messages, victim, value):
    return [replace(m, value=value) if m is victim else m for m in messages]


def test_a_chunk_without_a_key_column_is_quarantined_and_its_delta_waits(tmp_path, story):
    first, _, victim = story
    messages = with_value(first, victim, spoil(victim.value, "chunk-without-key-column"))
    index = index_of(tmp_path, messages)
    assert index.delta_report(TOPIC, DM, BAD).complete  # the keys alone cannot tell
    report = checked_report(index, TOPIC, DM, BAD)
    assert not report.complete
    chunk = int(victim.note.rsplit("c", 1)[1])
    assert report.increments[0].holes == {"stream 1": [(chunk, chunk)]}  # holes are ranges (first, last)
    offset = messages.index(next(m for m in messages if m.note == victim.note))
    (bad,) = index.quarantine(TOPIC)
    assert (bad["partition"], bad["offset"], bad["part"], bad["kind"]) == (0, offset, "value", "missing_key_column")
    assert bad["reason"] == (f"table 'returns', delta {BAD}, export {victim.note.split(':')[2]}: writer schema "
                             "lacks primary key column(s) 'sale_id' (key: id, sale_id): its rows cannot be keyed")
    assert [c["offset"] for c in index.quarantined_chunks(TOPIC, DM, BAD)] == [offset]
    # The deltas before and after it are not touched; checking again changes nothing.
    assert all(checked_report(index, TOPIC, DM, n).complete for n in (0, 1, 3))
    assert not checked_report(index, TOPIC, DM, BAD).complete and len(index.quarantine(TOPIC)) == 1


def test_a_good_copy_of_the_chunk_is_read_instead(tmp_path, story):
    first, _, victim = story
    spoilt = replace(victim, value=spoil(victim.value, "chunk-without-key-column"))
    copies = [spoilt if m is victim else m for m in first] + [victim]  # a retry's good copy, later
    index = index_of(tmp_path, copies)
    assert checked_report(index, TOPIC, DM, BAD).complete
    assert [q["kind"] for q in index.quarantine(TOPIC)] == ["missing_key_column"]
    _, refs = index.chosen_messages(TOPIC, DM, BAD)
    assert [r.offset for r in refs if r.table_name == "returns"] == [len(copies) - 1]


def test_a_good_reexport_makes_the_delta_due(tmp_path, story):
    first, held, victim = story
    index = index_of(tmp_path, with_value(first, victim, spoil(victim.value, "chunk-without-key-column")))
    assert not checked_report(index, TOPIC, DM, BAD).complete
    add(index, held)
    report = checked_report(index, TOPIC, DM, BAD)
    assert report.complete and report.chosen == held[0].note.split(":")[2]
    assert len(index.quarantine(TOPIC)) == 1  # the bad chunk stays quarantined, counted


def test_a_writer_field_the_ddl_does_not_have_is_refused_too(tmp_path, story):
    first, _, victim = story
    reader = fastavro.reader(io.BytesIO(victim.value))
    rows = [{**r, "colour": "red"} for r in reader]
    schema = {**reader.writer_schema, "fields": [{"name": "colour", "type": ["null", "string"]},
                                                 *reader.writer_schema["fields"]]}
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), rows)
    index = index_of(tmp_path, with_value(first, victim, buf.getvalue()))
    assert not checked_report(index, TOPIC, DM, BAD).complete
    (bad,) = index.quarantine(TOPIC)
    assert bad["kind"] == "schema_mismatch" and "writer field 'colour' is not a column" in bad["reason"]


def test_null_key_values_pass_the_schema_check(tmp_path, story):
    first, _, victim = story  # the schema fits: only the snapshot's key check can tell (sync cuts the range)
    index = index_of(tmp_path, with_value(first, victim, spoil(victim.value, "null-key-values-in-range")))
    assert checked_report(index, TOPIC, DM, BAD).complete and index.quarantine(TOPIC) == []


def test_messages_indexed_without_schemas_are_not_checked(tmp_path, story):
    first, _, victim = story  # an index written before it kept schemas, migrated
    store = StateStore(tmp_path / "index.sqlite")
    store.migrate("delta_index", _MIGRATIONS[:1])
    messages = with_value(first, victim, spoil(victim.value, "chunk-without-key-column"))
    index = index_of(tmp_path, messages, keep_schemas=False)
    assert checked_report(index, TOPIC, DM, BAD).complete and index.quarantine(TOPIC) == []
