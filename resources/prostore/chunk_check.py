"""Each chunk of a delta's chosen export checked against that export's own changelog, before the
delta is due.

What flows through: from the delta index, the writer schema ingest kept for every data message
of the delta's chosen increment, and the DDL records of that increment's changelog (both kept
once per distinct content); out: the delta's completeness report, after every chunk that cannot
land has been quarantined in the index (kind, topic, partition, offset, reason).

A chunk cannot land when reading it as its table's DDL fails before any row (an invalid Avro
schema, a field that is not a DDL column, a type that cannot hold the column's: the decoders'
own check, `arrow_rows.check_row_schema`), or when its writer schema lacks a primary-key column
(`backup.check_key_columns`: every row would have a NULL key, the snapshot's key check would fail
the run, and with it every delta of its range). Columns and key are those of the delta's own
changelog, as the run reads them: a table created by the delta's own DDL is checked by that DDL.

Guarantees:
- A refused chunk is a hole, as a corrupt copy is (completeness.py): another copy of it, or
  another complete export of the delta, is read instead; else the delta is incomplete and waits,
  its reason given, while the deltas before it land (a range never holds it). A good re-export
  makes it complete again.
- Cost: a query per delta walked; each distinct (changelog, table, writer schema) is replayed and
  checked once per process, and reads of stored bodies happen only then.
- Not checked, left to the run as before: messages indexed before the index kept schemas, a
  delta whose changelog cannot be replayed (the run fails naming the statement), and data of a
  table that its changelog does not have (the run reads only the changelog's tables).
"""

from __future__ import annotations

import json

from resources.codecs.arrow_rows import check_row_schema
from resources.codecs.backup import MESSAGE_TYPE_CHANGELOG, check_key_columns
from resources.codecs.ddl import EntitySchema, replay_changelog
from resources.errors import BadMessage, DdlParseError, DecodeError
from resources.prostore.completeness import DeltaReport
from resources.prostore.delta_index import DeltaIndex

_CACHED = 512  # entries per cache; cleared when full (a tick needs a few)
_tables: dict[tuple[str, ...], dict[str, EntitySchema] | None] = {}
_verdicts: dict[tuple[tuple[str, ...], str, str], DecodeError | None] = {}


def checked_report(index: DeltaIndex, topic: str, datamart: str, delta_num: int) -> DeltaReport | None:
    """The delta's report once the chunks of its chosen increment have been checked (module
    docstring): refused chunks are quarantined and the report says what is left."""
    report = index.delta_report(topic, datamart, delta_num)
    tried: set[str] = set()
    while report is not None and report.chosen is not None and report.chosen not in tried:
        tried.add(report.chosen)  # each export run once: at most as many rounds as runs
        bad = refused_chunks(index, topic, datamart, delta_num, report.chosen)
        if not bad:
            break
        index.write_batch(topic, bad=bad, next_offsets={})
        report = index.delta_report(topic, datamart, delta_num)
    return report


def refused_chunks(index: DeltaIndex, topic: str, datamart: str, delta_num: int,
                   increment_id: str) -> list[BadMessage]:
    """The data messages of one export run of a delta that its changelog refuses, every copy."""
    messages = index.increment_schemas(topic, datamart, delta_num, increment_id)
    changelog = {digest for _, _, kind, _, digest in messages if kind == MESSAGE_TYPE_CHANGELOG}
    if not changelog or None in changelog:
        return []  # no changelog (incomplete anyway), or indexed before schemas were kept
    key = tuple(sorted(changelog))
    tables = _changelog_tables(index, key)
    if tables is None:
        return []
    bad = []
    for partition, offset, kind, table, digest in messages:
        if kind == MESSAGE_TYPE_CHANGELOG or digest is None or table not in tables:
            continue
        err = _verdict(index, key, tables[table], digest)
        if err is not None:
            bad.append(BadMessage(partition, offset, "value", err.kind,
                                  f"table {table!r}, delta {delta_num}, export {increment_id}: {err.reason}"))
    return bad


def _changelog_tables(index: DeltaIndex, key: tuple[str, ...]) -> dict[str, EntitySchema] | None:
    """The tables the changelog made of these stored bodies describes; None if it cannot say."""
    if key not in _tables:
        bodies = index.schema_bodies(key)
        tables = None
        if len(bodies) == len(key):
            records = {tuple(r) for body in bodies.values() for r in json.loads(body)}
            try:
                entities = replay_changelog({"changeNum": n, "entityName": e, "changeQuery": q} for n, e, q in records)
                tables = {name: e for name, e in entities.items() if e.kind == "table"}
            except DdlParseError:
                tables = None  # the run replays it too, and fails naming the statement
        _remember(_tables, key, tables)
    return _tables[key]


def _verdict(index: DeltaIndex, changelog: tuple[str, ...], entity: EntitySchema,
             digest: str) -> DecodeError | None:
    """Why a writer schema cannot be read as `entity` (None: it can)."""
    key = (changelog, entity.name, digest)
    if key not in _verdicts:
        body = index.schema_bodies([digest]).get(digest)
        err = None
        if body is not None:
            try:
                check_row_schema(body.encode(), entity.columns)
                check_key_columns(json.loads(body), entity.primary_key)
            except DecodeError as exc:
                err = exc
        _remember(_verdicts, key, err)
    return _verdicts[key]


def _remember(cache: dict, key, value) -> None:
    if len(cache) >= _CACHED:
        cache.clear()
    cache[key] = value
