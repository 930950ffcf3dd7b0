"""Codec of Debezium change events (PostgreSQL and MySQL connectors, JSON converter): one Kafka
message (key, value) in, normalized records (resources/codecs/cdc.py) out.

Forms: with `schemas.enable` the key and value are `{"schema": ..., "payload": ...}` and the
column values are typed by the schema (resources/formats/debezium/values.py); without, they are
the payload alone and the values are what JSON gives (the lake infers their types). A topic is
either one table's (`<server>.<schema>.<table>`) or one routed topic holding many tables and the
connector's transaction events: the table is always read from `source`, never from the topic.

Value -> records:
- null value (the tombstone after a delete, for log compaction) -> nothing.
- a transaction event (`status` BEGIN | END, `id`, `event_count`, `data_collections`) ->
  `TransactionMark` begin | end (the sealing boundary: resources/formats/debezium/boundaries.py).
- `op` c (create), r (snapshot read) -> UPSERT of `after` (r flagged `is_backfill`);
  u -> BEFORE_IMAGE of `before` (when the connector sends one: REPLICA IDENTITY FULL, MySQL full
  row images) then UPSERT of `after`; when `before` holds another key (a key change sent as an
  update), the old key is a DELETE, not a before-image, so it does not stay in the lake;
  d -> DELETE of `before` (or of the key alone when `before` is null).
- t (truncate) -> `SchemaChange` kind TRUNCATE, as DataWorks' TRUNCATE (the changelog keeps it;
  the lake does not empty the table); m (a PostgreSQL logical decoding message) -> nothing.
- any other op -> `DebeziumUnknownOpError`.
Keys: the message key (the table's primary key, or `message.key.columns`) names the key columns
and its values; a data event with a null key (a table without a key) is `DebeziumMissingKeyError`,
as is a key column absent from the row image, or a row image that disagrees with the key.
Order (`order_key`, a total order per connector; duplicates re-sent after a connector restart
get the same key, so the lake drops them):
    (connector, position, transaction.total_order or 0, step, table, key)
position: PostgreSQL (`source.lsn`,); MySQL (binlog file number, file, `source.pos`, `source.row`),
so mysql-bin.999999 < mysql-bin.1000000. step 0 for an update's old image, 1 for the change.
Snapshot reads carry the snapshot's position, below every change streamed after it.
`event_time_us` is `source.ts_ms`; `transaction_id` is `transaction.id`, else `source.txId`.
Numbers are bounded (resources/codecs/limits.py): ts_ms within the years 1..9999, lsn, pos, row,
total_order 64-bit; errors name the field. Pure: no Dagster, no Kafka client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change, Record, SchemaChange, TransactionMark
from resources.codecs.json_text import BEYOND_LIMITS, beyond_limits, json_type, show
from resources.codecs.limits import LONG_MAX, MAX_TIMESTAMP_US, MIN_TIMESTAMP_US
from resources.errors import BadJsonError, DecodeError
from resources.formats.debezium.values import type_name, typed

SOURCE = "debezium"
CONNECTORS = ("postgresql", "mysql")
ROW_OPS = {"c": UPSERT, "r": UPSERT, "u": UPSERT, "d": DELETE}


class DebeziumBadEnvelopeError(DecodeError):
    """JSON, but not a Debezium change or transaction event: a field missing, mistyped or out of range."""

    kind = "debezium_bad_envelope"


class DebeziumUnknownOpError(DecodeError):
    """`op` is none of c, r, u, d, t, m."""

    kind = "debezium_unknown_op"


class DebeziumMissingKeyError(DecodeError):
    """A data event without a message key, or whose row image lacks or contradicts its key."""

    kind = "debezium_missing_key"


def _bad(reason: str, part: str = "value") -> DebeziumBadEnvelopeError:
    return DebeziumBadEnvelopeError(reason, part=part)


def _json(data: bytes, part: str) -> Any:
    try:
        return json.loads(bytes(data).decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise BadJsonError(f"not UTF-8: {exc}", part=part) from None
    except json.JSONDecodeError as exc:
        raise BadJsonError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", part=part) from None
    except BEYOND_LIMITS as exc:
        raise BadJsonError(beyond_limits(exc), part=part) from None


def _unwrap(doc: Any, part: str) -> tuple[Any, dict | None]:
    """(payload, schema) of the `schema`/`payload` form, or (doc, None) of the schemaless one."""
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
        schema = doc["schema"]
        if schema is not None and not isinstance(schema, dict):
            raise _bad(f"schema is {json_type(schema)}, expected an object", part)
        return doc["payload"], schema
    return doc, None


def _count(obj: Mapping, name: str, where: str = "") -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,19}", value):
        value = int(value)  # the JSON converter may quote longs
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LONG_MAX:
        raise _bad(f"{where}{name} is {show(value)}, expected a non-negative long")
    return value


def _text(obj: Mapping, name: str, where: str = "", required: bool = False) -> str | None:
    value = obj.get(name)
    if value is None or value == "":
        if required:
            raise _bad(f"{where}{name} is missing")
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise _bad(f"{where}{name} is {json_type(value)}, expected a string")
    return str(value)


def _event_time(obj: Mapping, where: str) -> int | None:
    ms = _count(obj, "ts_ms", where)
    if ms is not None and not MIN_TIMESTAMP_US <= ms * 1000 <= MAX_TIMESTAMP_US:
        raise _bad(f"{where}ts_ms {ms} is outside the years 1..9999")
    return None if ms is None else ms * 1000


def _transaction_event(env: Mapping) -> list[Record]:
    status = env.get("status")
    if status not in ("BEGIN", "END"):
        raise _bad(f"transaction event status is {show(status)}, expected BEGIN or END")
    _count(env, "event_count")
    collections = env.get("data_collections")
    if collections is not None and not isinstance(collections, list):
        raise _bad(f"data_collections is {json_type(collections)}, expected an array")
    return [TransactionMark(SOURCE, _text(env, "id", required=True), status.lower(),
                            event_time_us=_event_time(env, ""))]


def _field_schemas(schema: dict | None) -> dict[str, dict[str, dict]]:
    """{"before"/"after": {column: Connect field schema}} from the envelope's value schema."""
    if schema is None:
        return {}
    out: dict[str, dict[str, dict]] = {}
    for f in schema.get("fields") or ():
        if isinstance(f, dict) and f.get("field") in ("before", "after") and isinstance(f.get("fields"), list):
            out[f["field"]] = {c.get("field"): c for c in f["fields"] if isinstance(c, dict)}
    return out


def _row(image: Any, fields: dict[str, dict] | None, what: str) -> dict[str, Any] | None:
    if image is None:
        return None
    if not isinstance(image, dict):
        raise _bad(f"{what} is {json_type(image)}, expected an object (a row)")
    try:
        return {c: typed(v, None if fields is None else fields.get(c), f"{what}.{c}") for c, v in image.items()}
    except ValueError as exc:
        raise _bad(str(exc)) from None


def _key(key: bytes | None) -> dict[str, Any]:
    if key is None:
        raise DebeziumMissingKeyError("the event has no message key: a table without a primary key "
                                      "needs message.key.columns", part="key")
    payload, schema = _unwrap(_json(key, "key"), "key")
    if not isinstance(payload, dict) or not payload:
        raise DebeziumMissingKeyError(f"the message key is {json_type(payload)}, expected an object of "
                                      "key columns", part="key")
    fields = None if schema is None else {f.get("field"): f for f in schema.get("fields") or () if isinstance(f, dict)}
    try:
        return {c: typed(v, None if fields is None else fields.get(c), f"key.{c}") for c, v in payload.items()}
    except ValueError as exc:
        raise _bad(str(exc), "key") from None


def _position(source: Mapping) -> tuple[str, tuple]:
    connector = _text(source, "connector", "source.", required=True)
    if connector == "postgresql":
        lsn = _count(source, "lsn", "source.")
        if lsn is None:
            raise _bad("source.lsn is missing on a PostgreSQL event")
        return connector, (lsn,)
    if connector == "mysql":
        file = _text(source, "file", "source.", required=True)
        number = re.search(r"(?<![0-9])([0-9]{1,19})$", file)
        pos = _count(source, "pos", "source.")
        if number is None or pos is None:
            raise _bad(f"a MySQL event needs source.file (ending in its sequence number) and source.pos, "
                       f"got {show(file)} and {show(source.get('pos'))}")
        return connector, (int(number.group(1)), file, pos, _count(source, "row", "source.") or 0)
    raise _bad(f"source.connector {show(connector)} is none of {', '.join(CONNECTORS)}")


def _key_text(key: dict) -> tuple:
    return tuple((c, repr(v)) for c, v in sorted(key.items()))


def decode_debezium(key: bytes | None, value: bytes | None) -> list[Record]:
    """The records of one Debezium message (module docstring)."""
    if value is None:
        return []  # a tombstone
    env, schema = _unwrap(_json(value, "value"), "value")
    if env is None:
        return []  # a tombstone written as {"schema": null, "payload": null}
    if not isinstance(env, dict):
        raise _bad(f"the event is {json_type(env)}, expected an object")
    if "op" not in env and "status" in env:
        return _transaction_event(env)
    op = env.get("op")
    if not isinstance(op, str):
        raise _bad(f"op is {show(op)}, expected a string")
    if op == "m":
        return []
    if op not in ROW_OPS and op != "t":
        raise DebeziumUnknownOpError(f"op {op[:20]!r} is none of c, r, u, d, t, m", part="value")
    source = env.get("source")
    if not isinstance(source, dict):
        raise _bad(f"source is {json_type(source)}, expected an object")
    table = _text(source, "table", "source.", required=True)
    connector, position = _position(source)
    namespace = _text(source, "schema", "source.") if connector == "postgresql" else _text(source, "db", "source.")
    event_time = _event_time(source, "source.")
    txn = env.get("transaction")
    if txn is not None and not isinstance(txn, dict):
        raise _bad(f"transaction is {json_type(txn)}, expected an object")
    txn = txn or {}
    txn_id = _text(txn, "id", "transaction.") or _text(source, "txId", "source.")
    total_order = _count(txn, "total_order", "transaction.") or 0
    if op == "t":
        return [SchemaChange(SOURCE, namespace, table, "TRUNCATE", None, (connector, position, total_order, 1, table, ()),
                             event_time)]
    keys = _key(key)
    fields = _field_schemas(schema)
    before = _row(env.get("before"), fields.get("before") if schema else None, "before")
    after = _row(env.get("after"), fields.get("after") if schema else None, "after")
    main = before if op == "d" else after
    if main is None:
        if op != "d":
            raise _bad(f"after is missing on an op {op!r} event")
        main = dict(keys)  # a delete whose before image the connector left out
    for c, v in keys.items():
        if c not in main:
            raise DebeziumMissingKeyError(f"key column {c!r} is not in the {'before' if op == 'd' else 'after'} image",
                                          part="value")
        if main[c] != v:
            raise DebeziumMissingKeyError(f"key column {c!r} is {show(v)} in the message key but "
                                          f"{show(main[c])} in the row", part="value")
    column_types = {c: type_name(f) for c, f in (fields.get("after") or fields.get("before") or {}).items()}

    def change(operation: str, values: dict, step: int) -> Change:
        row_key = {c: values.get(c) for c in keys}
        return Change(SOURCE, namespace, table, operation, tuple(keys), values,
                      (connector, position, total_order, step, table, _key_text(row_key)),
                      column_types=column_types, transaction_id=txn_id, event_time_us=event_time,
                      is_backfill=op == "r", source_op=op)

    out: list[Record] = []
    if op == "u" and before is not None:
        missing = [c for c in keys if c not in before]
        if missing:
            raise DebeziumMissingKeyError(f"key column(s) {missing} are not in the before image", part="value")
        same = all(before[c] == keys[c] for c in keys)
        out.append(change(BEFORE_IMAGE if same else DELETE, before, 0))
    out.append(change(ROW_OPS[op], main, 1))
    return out
