"""The Debezium codec, boundary rule, emulator and oracle (resources/formats/debezium/), pure."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pytest

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change, SchemaChange, TransactionMark
from resources.emulator.stream_oracle import final_truth, same_rows, truth_after
from resources.errors import BadJsonError, DecodeError, Location
from resources.formats import stream_format
from resources.formats.debezium.codec import (
    DebeziumBadEnvelopeError, DebeziumMissingKeyError, DebeziumUnknownOpError, decode_debezium,
)
from resources.formats.debezium.emulator import DebeziumConfig, build_debezium_story

PG = {"connector": "postgresql", "name": "pg", "ts_ms": 1_700_000_000_000, "db": "shop", "schema": "public",
      "table": "customers", "txId": 571, "lsn": 33816}
MY = {"connector": "mysql", "name": "my", "ts_ms": 1_700_000_000_000, "db": "shop", "table": "customers",
      "file": "mysql-bin.999999", "pos": 154, "row": 0}
KEY = json.dumps({"id": 1}).encode()
COLS = [{"type": "int64", "optional": False, "field": "id"}, {"type": "string", "optional": True, "field": "name"},
        {"type": "bytes", "optional": True, "field": "balance", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
        {"type": "int32", "optional": True, "field": "born", "name": "io.debezium.time.Date"}]
SCHEMA = {"type": "struct", "fields": [{"type": "struct", "field": f, "fields": COLS} for f in ("before", "after")]}


def event(op, before=None, after=None, source=PG, **extra) -> dict:
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1, **extra}


def plain(doc) -> bytes:
    return json.dumps(doc).encode()


def with_schema(doc, schema=SCHEMA) -> bytes:
    return json.dumps({"schema": schema, "payload": doc}).encode()


@pytest.mark.parametrize("op,operation", [("c", UPSERT), ("r", UPSERT)])
def test_creates_and_snapshot_reads_upsert_the_after_image(op, operation):
    [ch] = decode_debezium(KEY, plain(event(op, after={"id": 1, "name": "Ada"})))
    assert (ch.operation, ch.values, ch.key_columns, ch.namespace, ch.table) == \
        (operation, {"id": 1, "name": "Ada"}, ("id",), "public", "customers")
    assert ch.is_backfill == (op == "r") and ch.event_time_us == 1_700_000_000_000_000 and ch.source_op == op


def test_an_update_gives_its_before_image_then_the_new_row():
    before, after = decode_debezium(KEY, plain(event("u", {"id": 1, "name": "Ada"}, {"id": 1, "name": "Bo"})))
    assert (before.operation, before.values["name"], after.operation, after.values["name"]) == \
        (BEFORE_IMAGE, "Ada", UPSERT, "Bo")
    assert before.order_key < after.order_key


def test_an_update_that_changes_the_key_deletes_the_old_key():
    old, new = decode_debezium(json.dumps({"id": 2}).encode(), plain(event("u", {"id": 1}, {"id": 2})))
    assert (old.operation, old.values, new.operation, new.values) == (DELETE, {"id": 1}, UPSERT, {"id": 2})


def test_a_delete_then_its_tombstone():
    [ch] = decode_debezium(KEY, plain(event("d", before={"id": 1, "name": "Ada"})))
    assert ch.operation == DELETE and ch.values == {"id": 1, "name": "Ada"}
    assert decode_debezium(KEY, None) == []
    assert decode_debezium(KEY, plain({"schema": None, "payload": None})) == []
    [bare] = decode_debezium(KEY, plain(event("d")))  # no before image: the key alone
    assert bare.values == {"id": 1}


def test_truncate_is_a_schema_change_and_a_message_is_nothing():
    [t] = decode_debezium(None, plain(event("t")))
    assert isinstance(t, SchemaChange) and t.kind == "TRUNCATE" and t.table == "customers"
    assert decode_debezium(None, plain(event("m"))) == []


def test_the_schema_form_types_the_values():
    unscaled = (-12345).to_bytes(2, "big", signed=True)
    after = {"id": 1, "name": "Ada", "balance": base64.b64encode(unscaled).decode(), "born": 19000}
    key = json.dumps({"schema": {"type": "struct", "fields": [COLS[0]]}, "payload": {"id": 1}}).encode()
    [ch] = decode_debezium(key, with_schema(event("c", after=after)))
    assert ch.values == {"id": 1, "name": "Ada", "balance": Decimal("-123.45"),
                         "born": dt.date(1970, 1, 1) + dt.timedelta(days=19000)}
    assert ch.column_types["balance"] == "decimal(10,2)" and ch.column_types["born"] == "io.debezium.time.Date"


def test_transaction_events_and_metadata():
    begin, end = (decode_debezium(None, plain({"status": s, "id": "571:33816", "event_count": n,
                                               "data_collections": c}))[0]
                  for s, n, c in (("BEGIN", None, None), ("END", 2, [{"data_collection": "public.a", "event_count": 2}])))
    assert isinstance(begin, TransactionMark) and (begin.kind, end.kind, end.transaction_id) == ("begin", "end", "571:33816")
    [ch] = decode_debezium(KEY, plain(event("c", after={"id": 1}, transaction={
        "id": "571:33816", "total_order": 2, "data_collection_order": 1})))
    assert ch.transaction_id == "571:33816" and ch.order_key[2] == 2


def test_mysql_positions_order_across_a_binlog_rotation():
    a = decode_debezium(KEY, plain(event("c", after={"id": 1}, source=MY)))[0]
    b = decode_debezium(KEY, plain(event("c", after={"id": 1}, source={**MY, "file": "mysql-bin.1000000", "pos": 4})))[0]
    assert a.order_key < b.order_key and a.namespace == "shop"


@pytest.mark.parametrize("key,value,error,part", [
    (KEY, b'{"op": "c", "after": {', BadJsonError, "value"),
    (KEY, b"\xff\xfe", BadJsonError, "value"),
    (KEY, plain(event("x", after={"id": 1})), DebeziumUnknownOpError, "value"),
    (KEY, plain(event("c", after={"id": 1}, source={**PG, "lsn": None})), DebeziumBadEnvelopeError, "value"),
    (KEY, plain(event("c", after={"id": 1}, source={**PG, "connector": "oracle"})), DebeziumBadEnvelopeError, "value"),
    (KEY, plain(event("c")), DebeziumBadEnvelopeError, "value"),
    (KEY, plain(event("c", after=[1])), DebeziumBadEnvelopeError, "value"),
    (KEY, plain(event("c", after={"id": 1, "tags": {"a": 1}})), DebeziumBadEnvelopeError, "value"),
    (KEY, plain({"status": "COMMIT", "id": "1"}), DebeziumBadEnvelopeError, "value"),
    (None, plain(event("c", after={"id": 1})), DebeziumMissingKeyError, "key"),
    (KEY, plain(event("c", after={"name": "Ada"})), DebeziumMissingKeyError, "value"),
    (KEY, plain(event("c", after={"id": 2})), DebeziumMissingKeyError, "value"),
])
def test_bad_input_is_a_typed_error_located_by_the_reader(key, value, error, part):
    with pytest.raises(error) as info:
        decode_debezium(key, value)
    err = info.value.located(Location("pg.shop.routed", 3, 1234))
    assert isinstance(err, DecodeError) and err.part == part
    assert "pg.shop.routed" in str(err) and "3" in str(err) and "1234" in str(err)


@pytest.mark.parametrize("field,value,ok", [
    ("ts_ms", 253_402_300_799_999, True), ("ts_ms", 253_402_300_800_000, False), ("ts_ms", -1, False),
    ("lsn", 2**63 - 1, True), ("lsn", 2**63, False), ("lsn", "9" * 19, False), ("lsn", True, False),
])
def test_source_numbers_at_their_limits(field, value, ok):
    doc = plain(event("c", after={"id": 1}, source={**PG, field: value}))
    if ok:
        assert decode_debezium(KEY, doc)
    else:
        with pytest.raises(DebeziumBadEnvelopeError):
            decode_debezium(KEY, doc)


@pytest.mark.parametrize("column,value", [
    (COLS[0], 2**63), (COLS[2], base64.b64encode(b"\x7f" * 18).decode()), (COLS[2], "A" * 10**6),
    (COLS[3], 2_932_897 + 1), ({"type": "int64", "field": "t", "name": "io.debezium.time.MicroTimestamp"}, 2**62),
    ({"type": "array", "field": "a"}, "x"),
])
def test_values_at_their_limits_are_refused_not_landed(column, value):
    schema = {"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": [COLS[0], column]}]}
    with pytest.raises(DebeziumBadEnvelopeError):
        decode_debezium(KEY, with_schema(event("c", after={"id": 1, column["field"]: value}), schema))
    with pytest.raises(BadJsonError):
        decode_debezium(KEY, b'{"op": "c", "after": {"id": ' + b"9" * 5000 + b"}}")


def test_the_boundary_is_the_transaction_end_and_duplicates_change_nothing():
    observe = stream_format("debezium").observe
    st: dict = {}
    begin = decode_debezium(None, plain({"status": "BEGIN", "id": "t1"}))
    change = decode_debezium(KEY, plain(event("c", after={"id": 1}, transaction={"id": "t1", "total_order": 1})))
    end = decode_debezium(None, plain({"status": "END", "id": "t1", "event_count": 1}))
    read = decode_debezium(KEY, plain(event("r", after={"id": 1}, source={**PG, "lsn": 10})))
    kinds = [observe(rs, st, None)[0] for rs in (read, begin, change, end, begin, change, end, [], None)]
    assert kinds == ["hard", "none", "none", "hard", "none", "none", "none", "none", "none"]


@pytest.mark.parametrize("wire", ["json", "schemaless"])
@pytest.mark.parametrize("connector", ["postgresql", "mysql"])
def test_replaying_the_emulator_gives_the_truth_at_every_transaction_end(wire, connector):
    story = build_debezium_story(DebeziumConfig(seed=3, wire=wire, connector=connector))
    records, lake, checked = [], {}, 0
    for m in story.messages:
        records += decode_debezium(m.key, m.value)
        lake = {}
        if m.note.startswith("END:"):
            for r in records:
                if isinstance(r, Change) and r.operation != BEFORE_IMAGE:
                    k = (r.namespace, r.table, tuple(r.values[c] for c in r.key_columns))
                    if k not in lake or lake[k].order_key < r.order_key:
                        lake[k] = r
            truth = truth_after("debezium", story, records, None)
            for table, rows in truth.items():
                got = [r.values for r in lake.values() if r.operation == UPSERT and f"{r.namespace}_{r.table}" == table]
                assert same_rows(got, rows), (m.note, table)
            checked += 1
    assert checked == sum(m.note.startswith("END:") for m in story.messages) > story.config.transactions
    final = final_truth("debezium", story)
    assert sum(len(v) for v in final.values()) > 0


def test_the_story_has_every_feature_and_its_truth_waits_for_the_snapshot():
    story = build_debezium_story(DebeziumConfig(seed=5))
    assert {"update_with_before", "delete_and_tombstone", "cross_table_transaction", "schema_change",
            "restart_duplicates"} <= set(story.injected)
    first = [decode_debezium(m.key, m.value) for m in story.messages[:3]]
    assert truth_after("debezium", story, [r for rs in first for r in rs], None) is None
    assert build_debezium_story(DebeziumConfig(seed=5)).messages == story.messages
