"""DataWorks codec and emulator: the seed's examples, every op, typed values, no-PK tables, every
bad input's exact error, and a replay of the emulator's traffic against its truth.

Test vectors come from ../shared/seeds/003_69964fe312001323.txt (DataWorks docs, Indonesian).
About corrections: the brief warned of comma typos in the document's JSON. In this copy of the
seed the five one-line change examples and the heartbeat example parse as JSON exactly as
written, so they are used verbatim with nothing corrected. The format template is not JSON: it
carries `//` comments (and placeholders such as "[string base64]" and an `op` listing every op);
the only edit made to it is stripping the comments, and the placeholders are filled in only
where a test says so.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import re

import pytest

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change, Heartbeat, SchemaChange, TransactionMark
from resources.codecs.dataworks import (
    DDL_OPS,
    DataWorksBadEnvelopeError,
    DataWorksBadJsonError,
    DataWorksBadValueError,
    DataWorksDecodeError,
    DataWorksUnknownOpError,
    DataWorksUnknownTypeError,
    decode_dataworks,
    sequence_order_key,
)
from resources.emulator.dataworks import AUDIT, ORDERS, DataWorksConfig, build_dataworks_story
from resources.errors import BadJsonError, DecodeError, Location

# --- Seed 003 test vectors, verbatim --------------------------------------------------------------

SEED_INSERT = """{ "schema": { "dataColumn": [ { "name": "name", "type": "STRING" }, { "name": "job", "type": "STRING" }, { "name": "sex", "type": "STRING" }, { "name": "#alibaba_rds_row_id#", "type": "LONG" } ], "primaryKey": null, "source": { "dbType": "MySQL", "dbName": "pkset_test", "tableName": "pkset_test_no_pk" } }, "payload": { "before": null, "after": { "dataColumn": { "name": "name11", "job": "job11", "sex": "man", "#alibaba_rds_row_id#": 15 } }, "sequenceId": "1620457642589000000", "timestamp": { "eventTime": 1620457896000, "systemTime": 1620457896977, "checkpointTime": 1620457896000 }, "op": "INSERT", "ddl": null }, "version": "0.0.1" }"""

SEED_UPDATE_BEFOR = """{ "schema": { "dataColumn": [ { "name": "name", "type": "STRING" }, { "name": "job", "type": "STRING" }, { "name": "sex", "type": "STRING" }, { "name": "#alibaba_rds_row_id#", "type": "LONG" } ], "primaryKey": null, "source": { "dbType": "MySQL", "dbName": "pkset_test", "tableName": "pkset_test_no_pk" } }, "payload": { "before": { "dataColumn": { "name": "name11", "job": "job11", "sex": "man", "#alibaba_rds_row_id#": 15 } }, "after": null, "sequenceId": "1620457642589000001", "timestamp": { "eventTime": 1620458077000, "systemTime": 1620458077779, "checkpointTime": 1620458077000 }, "op": "UPDATE_BEFOR", "ddl": null }, "version": "0.0.1" }"""

SEED_UPDATE_AFTER = """{ "schema": { "dataColumn": [ { "name": "name", "type": "STRING" }, { "name": "job", "type": "STRING" }, { "name": "sex", "type": "STRING" }, { "name": "#alibaba_rds_row_id#", "type": "LONG" } ], "primaryKey": null, "source": { "dbType": "MySQL", "dbName": "pkset_test", "tableName": "pkset_test_no_pk" } }, "payload": { "before": null, "after": { "dataColumn": { "name": "name11", "job": "job11", "sex": "woman", "#alibaba_rds_row_id#": 15 } }, "sequenceId": "1620457642589000001", "timestamp": { "eventTime": 1620458077000, "systemTime": 1620458077779, "checkpointTime": 1620458077000 }, "op": "UPDATE_AFTER", "ddl": null }, "version": "0.0.1" }"""

SEED_UPDATE_ONE_MESSAGE = """{ "schema": { "dataColumn": [ { "name": "name", "type": "STRING" }, { "name": "job", "type": "STRING" }, { "name": "sex", "type": "STRING" }, { "name": "#alibaba_rds_row_id#", "type": "LONG" } ], "primaryKey": null, "source": { "dbType": "MySQL", "dbName": "pkset_test", "tableName": "pkset_test_no_pk" } }, "payload": { "before": { "dataColumn": { "name": "name11", "job": "job11", "sex": "man", "#alibaba_rds_row_id#": 15 } }, "after": { "dataColumn": { "name": "name11", "job": "job11", "sex": "woman", "#alibaba_rds_row_id#": 15 } }, "sequenceId": "1620457642589000001", "timestamp": { "eventTime": 1620458077000, "systemTime": 1620458077779, "checkpointTime": 1620458077000 }, "op": "UPDATE_AFTER", "ddl": null }, "version": "0.0.1" }"""

SEED_DELETE = """{ "schema": { "dataColumn": [ { "name": "name", "type": "STRING" }, { "name": "job", "type": "STRING" }, { "name": "sex", "type": "STRING" }, { "name": "#alibaba_rds_row_id#", "type": "LONG" } ], "primaryKey": null, "source": { "dbType": "MySQL", "dbName": "pkset_test", "tableName": "pkset_test_no_pk" } }, "payload": { "before": { "dataColumn": { "name": "name11", "job": "job11", "sex": "woman", "#alibaba_rds_row_id#": 15 } }, "after": null, "sequenceId": "1620457642589000002", "timestamp": { "eventTime": 1620458266000, "systemTime": 1620458266101, "checkpointTime": 1620458266000 }, "op": "DELETE", "ddl": null }, "version": "0.0.1" }"""

SEED_HEARTBEAT = """{
"schema": {
"dataColumn": null,
"primaryKey": null,
"source": null
},
"payload": {
"before": null,
"after": null,
"sequenceId": null,
"timestamp": {
"eventTime": 1620457659000,
"checkpointTime": 1620457659000
},
"op": "MHEARTBEAT",
"ddl": null
},
"version": "0.0.1"
}"""

SEED_TEMPLATE = """{
"schema": { // Informasi perubahan metadata. Hanya nama kolom dan tipe kolom yang ditentukan.
"dataColumn": [// Informasi perubahan kolom. Data dalam topik tujuan diperbarui berdasarkan informasi ini.
{
"name": "id",
"type": "LONG"
},
{
"name": "name",
"type": "STRING"
},
{
"name": "binData",
"type": "BYTES"
},
{
"name": "ts",
"type": "DATE"
},
{
"name":"rowid",// Jika sumber data Oracle digunakan, rowid ditambahkan sebagai kolom.
"type":"STRING"
}
],
"primaryKey": [
"pkName1",
"pkName2"
],
"source": {
"dbType": "mysql",
"dbVersion": "1.0.0",
"dbName": "myDatabase",
"schemaName": "mySchema",
"tableName": "tableName"
}
},
"payload": {
"before": {
"dataColumn":{
"id": 111,
"name":"scooter",
"binData": "[string base64]",
"ts": 1590315269000,
"rowid": "AAIUMPAAFAACxExAAE"// ID baris dalam sumber data Oracle. Nilainya bertipe STRING.
}
},
"after": {
"dataColumn":{
"id": 222,
"name":"donald",
"binData": "[string base64]",
"ts": 1590315269000,
"rowid": "AAIUMPAAFAACxExAAE"// ID baris dalam sumber data Oracle. Nilainya bertipe STRING.
}
},
"sequenceId":"XXX",// ID urutan unik setiap catatan data yang dihasilkan setelah data tambahan dan semua data digabungkan. Nilainya bertipe STRING.
"scn":"xxxx",// Nomor perubahan sistem (SCN) dari sumber data Oracle. Nilainya bertipe STRING.
"op": "INSERT/UPDATE_BEFOR/UPDATE_AFTER/DELETE/TRANSACTION_BEGIN/TRANSACTION_END/CREATE/ALTER/ERASE/QUERY/TRUNCATE/RENAME/CINDEX/DINDEX/GTID/XACOMMIT/XAROLLBACK/MHEARTBEAT...",// Operasi yang dilakukan. Nilai parameter ini peka huruf besar-kecil.
"timestamp": {
"eventTime": 1,// Diperlukan. Waktu ketika data dalam database sumber berubah. Nilainya adalah timestamp 13-bit dalam milidetik.
"systemTime": 2,// Opsional. Waktu ketika node sinkronisasi membaca pesan perubahan. Nilainya adalah timestamp 13-bit dalam milidetik.
"checkpointTime": 3// Opsional. Waktu tertentu ketika offset sinkronisasi diatur ulang. Nilainya adalah timestamp 13-bit dalam milidetik dan sama dengan nilai bidang eventTime dalam banyak kasus.
},
"ddl": {
"text": "ADD COLUMN ...",
"ddlMeta": "[Pernyataan SQL diserialisasi biner, dinyatakan dalam string base64]"
}
},
"version":"1.0.0"
}"""

SEED_VECTORS = [SEED_INSERT, SEED_UPDATE_BEFOR, SEED_UPDATE_AFTER, SEED_UPDATE_ONE_MESSAGE, SEED_DELETE, SEED_HEARTBEAT]

NO_PK_TYPES = {"name": "STRING", "job": "STRING", "sex": "STRING", "#alibaba_rds_row_id#": "LONG"}
ROW_MAN = {"name": "name11", "job": "job11", "sex": "man", "#alibaba_rds_row_id#": 15}
ROW_WOMAN = {"name": "name11", "job": "job11", "sex": "woman", "#alibaba_rds_row_id#": 15}


def decode(text: str | bytes | dict, key: bytes | None = None):
    if isinstance(text, dict):
        text = json.dumps(text)
    return decode_dataworks(key, text.encode("utf-8") if isinstance(text, str) else text)


def template() -> dict:
    """The seed's format template with its `//` comments stripped (the only edit)."""
    return json.loads(re.sub(r"//[^\n]*", "", SEED_TEMPLATE))


def seed_change(expected_op: str, values: dict, seq: str, event_ms: int, event_op: str, *, old: bool = False) -> Change:
    return Change(
        source="dataworks", namespace="pkset_test", table="pkset_test_no_pk", operation=expected_op,
        key_columns=("#alibaba_rds_row_id#",), values=values,
        order_key=(0, int(seq), 0 if old else 1), captured=None, column_types=NO_PK_TYPES,
        transaction_id=None, last_in_transaction=None, event_time_us=event_ms * 1000,
        event_id=f"{seq}:{event_op}", is_backfill=False,
    )


# --- The seed's examples ----------------------------------------------------------------------------


def test_seed_vectors_are_json_as_written():
    for text in SEED_VECTORS:
        json.loads(text)


def test_seed_insert():
    [c] = decode(SEED_INSERT)
    assert c == dataclasses.replace(seed_change(UPSERT, ROW_MAN, "1620457642589000000", 1620457896000, "INSERT"),
                                    source_op="INSERT")
    # the table has no primary key: the seed's RDS row id identifies the row, not the whole row
    assert list(c.values) == ["name", "job", "sex", "#alibaba_rds_row_id#"]


def test_seed_update_as_two_messages():
    [before] = decode(SEED_UPDATE_BEFOR)
    [after] = decode(SEED_UPDATE_AFTER)
    assert before == dataclasses.replace(
        seed_change(BEFORE_IMAGE, ROW_MAN, "1620457642589000001", 1620458077000, "UPDATE_BEFOR", old=True),
        source_op="UPDATE_BEFOR")
    assert after == dataclasses.replace(
        seed_change(UPSERT, ROW_WOMAN, "1620457642589000001", 1620458077000, "UPDATE_AFTER"), source_op="UPDATE_AFTER")
    assert before.order_key < after.order_key  # same sequenceId, old image first


def test_seed_update_as_one_message_equals_the_two_message_form():
    old, new = decode(SEED_UPDATE_ONE_MESSAGE)
    assert (old.operation, new.operation) == (BEFORE_IMAGE, UPSERT)
    assert old.source_op == new.source_op == "UPDATE_AFTER"
    [b], [a] = decode(SEED_UPDATE_BEFOR), decode(SEED_UPDATE_AFTER)
    assert dataclasses.replace(old, source_op="UPDATE_BEFOR") == b
    assert new == a


def test_seed_delete_takes_values_from_before():
    [c] = decode(SEED_DELETE)
    assert c == dataclasses.replace(seed_change(DELETE, ROW_WOMAN, "1620457642589000002", 1620458266000, "DELETE"),
                                    source_op="DELETE")


def test_seed_heartbeat():
    assert decode(SEED_HEARTBEAT) == [Heartbeat("dataworks", 1620457659000 * 1000, None)]


def test_seed_template_verbatim_names_no_real_op():
    with pytest.raises(DataWorksUnknownOpError) as exc:
        decode(template())
    assert exc.value.reason.startswith('unknown op "INSERT/UPDATE_BEFOR/')


def test_seed_template_with_placeholders_filled():
    doc = template()
    doc["payload"]["op"] = "UPDATE_AFTER"
    for image in ("before", "after"):
        doc["payload"][image]["dataColumn"]["binData"] = base64.b64encode(b"\x00\x01bin").decode()
    # Its primaryKey placeholders name no declared column: a bad envelope, said plainly.
    with pytest.raises(DataWorksBadEnvelopeError, match="primaryKey names 'pkName1'"):
        decode(doc)
    doc["schema"]["primaryKey"] = ["id"]
    old, new = decode(doc)
    ts = dt.datetime(2020, 5, 24, 10, 14, 29)  # 1590315269000 ms: a date-time, kept as one
    assert (old.operation, new.operation) == (DELETE, UPSERT)  # the key moved from 111 to 222
    assert old.values == {"id": 111, "name": "scooter", "binData": b"\x00\x01bin", "ts": ts, "rowid": "AAIUMPAAFAACxExAAE"}
    assert new.values == {"id": 222, "name": "donald", "binData": b"\x00\x01bin", "ts": ts, "rowid": "AAIUMPAAFAACxExAAE"}
    assert new.namespace == "myDatabase.mySchema" and new.table == "tableName"
    assert new.key_columns == ("id",) and new.event_time_us == 1000
    assert old.order_key == (1, "XXX", 0) and new.order_key == (1, "XXX", 1)  # non-digit ids compare as text
    # With no primary key, Oracle's rowid identifies the row: same rowid, so a plain before image.
    doc["schema"]["primaryKey"] = None
    old, new = decode(doc)
    assert old.key_columns == ("rowid",) and old.operation == BEFORE_IMAGE


# --- Each op ------------------------------------------------------------------------------------------

ORDERS_COLUMNS = [{"name": "id", "type": "LONG"}, {"name": "who", "type": "STRING"}]


def message(op: str, *, before=None, after=None, seq: str | int | None = "100", columns=None, pk=("id",),
            source=None, ddl=None, event_ms: int = 1_700_000_000_123) -> dict:
    return {
        "schema": {
            "dataColumn": ORDERS_COLUMNS if columns is None else columns,
            "primaryKey": list(pk) if pk is not None else None,
            "source": source if source is not None else {"dbType": "MySQL", "dbName": "shop", "tableName": "orders"},
        },
        "payload": {
            "before": None if before is None else {"dataColumn": before},
            "after": None if after is None else {"dataColumn": after},
            "sequenceId": seq,
            "timestamp": {"eventTime": event_ms, "systemTime": event_ms + 5, "checkpointTime": event_ms},
            "op": op,
            "ddl": ddl,
        },
        "version": "0.0.1",
    }


def test_insert_update_delete_on_a_keyed_table():
    [ins] = decode(message("INSERT", after={"id": 1, "who": "a"}))
    assert (ins.operation, ins.key_columns, ins.values, ins.order_key) == (UPSERT, ("id",), {"id": 1, "who": "a"}, (0, 100, 1))
    assert ins.event_time_us == 1_700_000_000_123_000 and ins.event_id == "100:INSERT"
    [b] = decode(message("UPDATE_BEFOR", before={"id": 1, "who": "a"}))
    assert (b.operation, b.event_id, b.order_key) == (BEFORE_IMAGE, "100:UPDATE_BEFOR", (0, 100, 0))
    [a] = decode(message("UPDATE_AFTER", after={"id": 1, "who": "b"}))
    assert (a.operation, a.values, a.event_id) == (UPSERT, {"id": 1, "who": "b"}, "100:UPDATE_AFTER")
    old, new = decode(message("UPDATE_AFTER", before={"id": 1, "who": "a"}, after={"id": 1, "who": "b"}))
    assert (old.operation, new.operation) == (BEFORE_IMAGE, UPSERT)
    [d] = decode(message("DELETE", before={"id": 1, "who": "b"}))
    assert (d.operation, d.values, d.event_id) == (DELETE, {"id": 1, "who": "b"}, "100:DELETE")


def test_combined_update_that_moves_the_primary_key_deletes_the_old_key():
    old, new = decode(message("UPDATE_AFTER", before={"id": 1, "who": "a"}, after={"id": 2, "who": "a"}))
    assert (old.operation, old.values["id"], new.operation, new.values["id"]) == (DELETE, 1, UPSERT, 2)
    assert old.event_id == "100:UPDATE_BEFOR"


@pytest.mark.parametrize("op,kind", [("TRANSACTION_BEGIN", "begin"), ("TRANSACTION_END", "end"),
                                     ("XACOMMIT", "end"), ("XAROLLBACK", "rollback")])
def test_transaction_marks(op, kind):
    doc = message(op, columns=[], pk=None, source={"dbType": "MySQL", "dbName": "shop"})
    doc["schema"]["dataColumn"] = None
    assert decode(doc) == [TransactionMark("dataworks", None, kind, (0, 100, 1), 1_700_000_000_123_000)]
    doc["payload"]["sequenceId"] = None
    assert decode(doc) == [TransactionMark("dataworks", None, kind, None, 1_700_000_000_123_000)]
    doc["schema"] = {"dataColumn": None, "primaryKey": None, "source": None}
    assert decode(doc)[0].kind == kind


def test_gtid_is_ignored():
    assert decode(message("GTID")) == []


@pytest.mark.parametrize("op", sorted(DDL_OPS))
def test_ddl_ops_are_schema_changes(op):
    text = "ALTER TABLE `orders` ADD COLUMN `note` VARCHAR(64)"
    doc = message(op, ddl={"text": text, "ddlMeta": base64.b64encode(b"\x01meta").decode()})
    assert decode(doc) == [SchemaChange("dataworks", "shop", "orders", op, text, (0, 100, 1), 1_700_000_000_123_000)]
    doc["payload"]["ddl"] = None
    assert decode(doc)[0].text is None


@pytest.mark.parametrize("op", ["insert", "Insert", "UPDATE_BEFORE", "MHeartbeat", "", "UPSERT"])
def test_ops_are_case_sensitive_and_closed(op):
    with pytest.raises(DataWorksUnknownOpError) as exc:
        decode(message(op, after={"id": 1, "who": "a"}))
    assert exc.value.kind == "dataworks_unknown_op" and json.dumps(op) in str(exc.value)


# --- Typed values -------------------------------------------------------------------------------------

ALL_TYPES = [{"name": n, "type": t} for n, t in
             [("id", "LONG"), ("s", "STRING"), ("b", "BOOLEAN"), ("d", "DOUBLE"), ("ts", "DATE"), ("bin", "BYTES")]]


def typed(**values):
    [c] = decode(message("INSERT", columns=ALL_TYPES, after={"id": 1, **values}))
    return c


def test_every_type_decodes_to_its_python_value():
    c = typed(s="東京", b=True, d=2.5, ts=1590315269123, bin=base64.b64encode(b"\x00\xff\x10ok").decode())
    assert c.values == {"id": 1, "s": "東京", "b": True, "d": 2.5, "ts": dt.datetime(2020, 5, 24, 10, 14, 29, 123000),
                        "bin": b"\x00\xff\x10ok"}
    assert c.values["ts"].tzinfo is None  # naive UTC
    assert c.column_types == {"id": "LONG", "s": "STRING", "b": "BOOLEAN", "d": "DOUBLE", "ts": "DATE", "bin": "BYTES"}


def test_type_edge_cases():
    assert typed(s=None, b=None, d=None, ts=None, bin=None).values == {"id": 1, "s": None, "b": None, "d": None,
                                                                       "ts": None, "bin": None}
    assert typed(d=3).values["d"] == 3.0 and isinstance(typed(d=3).values["d"], float)
    assert typed(bin="").values["bin"] == b""
    assert typed(ts=-1000).values["ts"] == dt.datetime(1969, 12, 31, 23, 59, 59)
    assert typed(ts=0).values["ts"] == dt.datetime(1970, 1, 1)
    [c] = decode(message("INSERT", columns=ALL_TYPES, after={"id": "9223372036854775807"}))
    assert c.values["id"] == 2**63 - 1  # LONG as a string of digits: tolerated, lossless
    [c] = decode(message("INSERT", columns=ALL_TYPES, after={"id": "-42"}))
    assert c.values["id"] == -42


@pytest.mark.parametrize("column,value,why", [
    ("s", 5, "expected a JSON string"),
    ("b", 1, "expected true or false"),
    ("b", "true", "expected true or false"),
    ("d", "1.5", "expected a JSON number"),
    ("d", True, "expected a JSON number"),
    ("id", 1.5, "expected a JSON integer"),
    ("id", "12a", "expected a JSON integer"),
    ("id", " 12", "expected a JSON integer"),
    ("id", True, "expected a JSON integer"),
    ("id", 2**63, "out of the signed 64-bit LONG range"),
    ("id", "-9223372036854775809", "out of the signed 64-bit LONG range"),
    ("ts", "1590315269000", "expected epoch milliseconds as a JSON integer"),
    ("ts", 1590315269000.5, "expected epoch milliseconds as a JSON integer"),
    ("ts", 10**20, "epoch milliseconds out of the datetime range"),
    ("bin", "[string base64]", "not standard Base64"),
    ("bin", "abc", "not standard Base64"),
    ("bin", 12, "expected a Base64 JSON string"),
])
def test_a_value_that_does_not_fit_its_type(column, value, why):
    after = {"id": 1, column: value}
    with pytest.raises(DataWorksBadValueError) as exc:
        decode(message("INSERT", columns=ALL_TYPES, after=after))
    assert exc.value.kind == "dataworks_bad_value" and exc.value.part == "value"
    assert exc.value.reason.startswith(f"payload.after column {column!r} (") and why in exc.value.reason


@pytest.mark.parametrize("typ", ["INT", "long", "DECIMAL", "TIMESTAMP", ""])
def test_an_unknown_column_type(typ):
    cols = [{"name": "id", "type": "LONG"}, {"name": "x", "type": typ}]
    with pytest.raises(DataWorksUnknownTypeError) as exc:
        decode(message("INSERT", columns=cols, after={"id": 1, "x": None}))
    assert exc.value.reason == (f"column 'x' has type {typ!r}; known types: BOOLEAN, DOUBLE, DATE, BYTES, LONG, STRING")


def test_a_row_may_omit_non_key_columns():
    [c] = decode(message("INSERT", columns=ALL_TYPES, after={"id": 1, "s": "x"}))
    assert c.values == {"id": 1, "s": "x"} and c.captured == frozenset({"id", "s"})


# --- Tables without a primary key ---------------------------------------------------------------------

PLAIN = [{"name": "a", "type": "STRING"}, {"name": "n", "type": "LONG"}]


def test_no_pk_and_no_row_id_keys_by_the_whole_row():
    [ins] = decode(message("INSERT", columns=PLAIN, pk=None, after={"a": "x", "n": 1}))
    assert ins.key_columns == ("a", "n") and ins.operation == UPSERT
    # an update changes the row's identity: the old image is a delete, in either form
    [b] = decode(message("UPDATE_BEFOR", columns=PLAIN, pk=None, before={"a": "x", "n": 1}))
    assert (b.operation, b.values, b.order_key, b.event_id) == (DELETE, {"a": "x", "n": 1}, (0, 100, 0), "100:UPDATE_BEFOR")
    old, new = decode(message("UPDATE_AFTER", columns=PLAIN, pk=None, before={"a": "x", "n": 1}, after={"a": "x", "n": 2}))
    assert (old.operation, new.operation) == (DELETE, UPSERT)
    assert decode(message("INSERT", columns=PLAIN, pk=[], after={"a": "x", "n": 1}))[0].key_columns == ("a", "n")


def test_no_pk_with_oracle_rowid_keys_by_rowid_and_a_pk_wins_over_it():
    cols = PLAIN + [{"name": "rowid", "type": "STRING"}]
    row = {"a": "x", "n": 1, "rowid": "AAIUMPAAFAACxExAAE"}
    [c] = decode(message("UPDATE_BEFOR", columns=cols, pk=None, before=row))
    assert c.key_columns == ("rowid",) and c.operation == BEFORE_IMAGE
    [c] = decode(message("INSERT", columns=cols, pk=["n"], after=row))
    assert c.key_columns == ("n",)


# --- Order keys ----------------------------------------------------------------------------------------


def test_order_keys_compare_digits_as_numbers():
    assert sequence_order_key("9") < sequence_order_key("10") < sequence_order_key("abc")
    assert sequence_order_key("10", old_image=True) < sequence_order_key("10")
    assert sequence_order_key("1620457642589000001") == (0, 1620457642589000001, 1)
    assert sequence_order_key("0x1A") == (1, "0x1A", 1)
    [c] = decode(message("INSERT", seq=1620457642589000000, after={"id": 1, "who": "a"}))
    assert c.order_key == (0, 1620457642589000000, 1) and c.event_id == "1620457642589000000:INSERT"


# --- Bad input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [b'{"schema": {}, "payload": {', b"", b"\xff\xfe{}", b"schema", b"{'op': 1}"])
def test_broken_json(value):
    with pytest.raises(DataWorksBadJsonError) as exc:
        decode_dataworks(None, value)
    err = exc.value
    assert isinstance(err, BadJsonError) and isinstance(err, DataWorksDecodeError)
    assert err.kind == "dataworks_bad_json" and err.part == "value" and err.location is None
    assert err.reason.startswith(("not JSON:", "not UTF-8:"))


def test_a_kafka_tombstone_is_not_json():
    with pytest.raises(DataWorksBadJsonError, match="value is NoneType, not bytes"):
        decode_dataworks(b"", None)  # type: ignore[arg-type]


def test_a_utf8_bom_is_tolerated():
    assert decode_dataworks(None, b"\xef\xbb\xbf" + SEED_HEARTBEAT.encode())[0].event_time_us == 1620457659000000


def _without(doc: dict, *path: str) -> dict:
    target = doc
    for p in path[:-1]:
        target = target[p]
    del target[path[-1]]
    return doc


def _with(doc: dict, value, *path: str) -> dict:
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return doc


INS = {"id": 1, "who": "a"}

BAD_ENVELOPES = [
    ("array", [1, 2], "message is a JSON array, not an object"),
    ("no schema", _without(message("INSERT", after=INS), "schema"), "message lacks field 'schema'"),
    ("no payload", _without(message("INSERT", after=INS), "payload"), "message lacks field 'payload'"),
    ("payload null", _with(message("INSERT", after=INS), None, "payload"), "'payload' is a JSON null, not an object"),
    ("schema string", _with(message("INSERT", after=INS), "x", "schema"), "'schema' is a JSON string, not an object or null"),
    ("no op", _without(message("INSERT", after=INS), "payload", "op"), "payload lacks field 'op'"),
    ("op number", _with(message("INSERT", after=INS), 1, "payload", "op"), "payload field 'op' must be a string, got 1"),
    ("no timestamp", _without(message("INSERT", after=INS), "payload", "timestamp"),
     "payload.timestamp must be an object, got null"),
    ("eventTime text", _with(message("INSERT", after=INS), "1620457896000", "payload", "timestamp", "eventTime"),
     'payload.timestamp.eventTime must be epoch milliseconds (an integer), got "1620457896000"'),
    ("heartbeat without eventTime", _without(json.loads(SEED_HEARTBEAT), "payload", "timestamp", "eventTime"),
     "payload.timestamp.eventTime must be epoch milliseconds (an integer), got null"),
    ("insert without after", message("INSERT", before=INS), "op INSERT needs payload.after, which is null or missing"),
    ("delete without before", message("DELETE", after=INS), "op DELETE needs payload.before, which is null or missing"),
    ("update_befor without before", message("UPDATE_BEFOR", after=INS),
     "op UPDATE_BEFOR needs payload.before, which is null or missing"),
    ("update_after without after", message("UPDATE_AFTER", before=INS),
     "op UPDATE_AFTER needs payload.after, which is null or missing"),
    ("no sequenceId", message("INSERT", after=INS, seq=None), "op INSERT needs payload.sequenceId, which is null or missing"),
    ("empty sequenceId", message("INSERT", after=INS, seq=""), 'payload.sequenceId must be a non-empty string, got ""'),
    ("sequenceId object", _with(message("INSERT", after=INS), {"a": 1}, "payload", "sequenceId"),
     'payload.sequenceId must be a non-empty string, got {"a": 1}'),
    ("dataColumn null", _with(message("INSERT", after=INS), None, "schema", "dataColumn"),
     "schema.dataColumn must be a non-empty array for a row change, got null"),
    ("column without type", message("INSERT", after=INS, columns=[{"name": "id"}]),
     'schema.dataColumn[0] must be an object with string \'name\' and \'type\', got {"name": "id"}'),
    ("column twice", message("INSERT", after=INS, columns=ORDERS_COLUMNS + [{"name": "id", "type": "LONG"}]),
     "schema.dataColumn declares column 'id' twice"),
    ("source null", _with(message("INSERT", after=INS), None, "schema", "source"),
     "a row change needs schema.source, which is null or missing"),
    ("no tableName", message("INSERT", after=INS, source={"dbType": "MySQL", "dbName": "shop"}),
     "a row change needs schema.source.tableName"),
    ("tableName number", message("INSERT", after=INS, source={"dbName": "shop", "tableName": 7}),
     "schema.source.tableName must be a string or null, got 7"),
    ("primaryKey string", _with(message("INSERT", after=INS), "id", "schema", "primaryKey"),
     'schema.primaryKey must be an array or null, got "id"'),
    ("primaryKey undeclared", message("INSERT", after=INS, pk=("pkName1",)),
     "schema.primaryKey names 'pkName1', which schema.dataColumn does not declare"),
    ("row without dataColumn", _with(message("INSERT", after=INS), INS, "payload", "after"),
     'payload.after must be null or an object with a \'dataColumn\' object, got {"id": 1, "who": "a"}'),
    ("row with undeclared column", message("INSERT", after={**INS, "extra": 1}),
     "payload.after has column 'extra', which schema.dataColumn does not declare"),
    ("delete without key", message("DELETE", before={"who": "a"}), "payload.before lacks key column 'id'"),
    ("ddl not object", message("ALTER", ddl="ALTER TABLE x"), 'payload.ddl must be an object or null, got "ALTER TABLE x"'),
]


@pytest.mark.parametrize("doc,reason", [(d, r) for _, d, r in BAD_ENVELOPES], ids=[i for i, _, _ in BAD_ENVELOPES])
def test_a_wrong_envelope(doc, reason):
    with pytest.raises(DataWorksBadEnvelopeError) as exc:
        decode(json.dumps(doc))
    err = exc.value
    assert err.reason == reason
    assert err.kind == "dataworks_bad_envelope" and err.part == "value" and err.location is None
    assert str(err) == f"dataworks_bad_envelope (value): {reason}"


def test_errors_take_a_location_from_the_reader():
    with pytest.raises(DecodeError) as exc:
        decode(message("upsert", after=INS))
    err = exc.value.located(Location(topic="dw", partition=0, offset=42))
    assert str(err) == "dataworks_unknown_op (value) at topic 'dw' partition 0 offset 42: unknown op \"upsert\" (ops are case sensitive)"


# --- The emulator, replayed through the codec ------------------------------------------------------------


def replay(story):
    """Decode every message as a plain consumer would and compare with the truth at every watermark.

    Dedupe changes by event_id (sequenceId + op), marks by order_key; a heartbeat counts only when
    it moves the watermark forward; BEFORE_IMAGEs are skipped; upserts and deletes are applied by
    each change's own key columns. Returns what was seen, for the callers' own checks.
    """
    state: dict[str, dict[tuple, dict]] = {}
    seen_events: set[str] = set()
    seen_marks: set[tuple] = set()
    watermark = None
    heartbeats, ends, duplicates, schema_changes = [], [], 0, []
    hb_truth = iter(story.heartbeats)
    for msg in story.messages:
        assert msg.role == "dataworks"
        for rec in decode_dataworks(msg.key, msg.value):
            if isinstance(rec, Change):
                if rec.event_id in seen_events:
                    duplicates += 1
                    continue
                seen_events.add(rec.event_id)
                if rec.operation == BEFORE_IMAGE:
                    continue
                rows = state.setdefault(rec.table, {})
                key = tuple(rec.values[c] for c in rec.key_columns)
                if rec.operation == DELETE:
                    assert key in rows, f"delete of a row that is not there: {rec}"
                    del rows[key]
                else:
                    rows[key] = dict(rec.values)
            elif isinstance(rec, Heartbeat):
                if watermark is not None and rec.event_time_us <= watermark:
                    continue
                watermark = rec.event_time_us
                event_time_us, bound = next(hb_truth)
                assert rec.event_time_us == event_time_us
                assert_same(state, story.state_after(bound), f"heartbeat at {event_time_us}")
                heartbeats.append(event_time_us)
            elif isinstance(rec, TransactionMark):
                if rec.order_key in seen_marks:
                    continue
                seen_marks.add(rec.order_key)
                if rec.kind == "end":
                    assert_same(state, story.state_after(rec.order_key), f"transaction end {rec.order_key}")
                    ends.append((rec.event_time_us, rec.order_key))
            elif isinstance(rec, SchemaChange):
                if rec.order_key not in seen_marks:
                    seen_marks.add(rec.order_key)
                    schema_changes.append(rec)
    return heartbeats, ends, duplicates, schema_changes, state


def assert_same(replayed: dict, truth: dict, where: str) -> None:
    """Equal state; a row written before `ALTER ... ADD COLUMN` reads the new column as null."""
    got = {t: rows for t, rows in replayed.items() if rows}
    want = {t: rows for t, rows in truth.items() if rows}
    assert set(got) == set(want), where
    for table, rows in want.items():
        assert set(got[table]) == set(rows), f"{where}: {table} keys differ"
        for key, row in rows.items():
            assert set(got[table][key]) <= set(row), f"{where}: {table} {key} has extra columns"
            assert {c: got[table][key].get(c) for c in row} == row, f"{where}: {table} {key}"


REPLAY_CONFIGS = [
    DataWorksConfig(seed=1),
    DataWorksConfig(seed=2, rds_row_id=True),
    DataWorksConfig(seed=3, combined_update_rate=0.0, failover_rate=0.5),
    DataWorksConfig(seed=4, combined_update_rate=1.0, heartbeat_every_ms=3_000, transactions=80),
    DataWorksConfig(seed=5, alter_at=0, initial_rows=0, max_ops_per_transaction=8),
]


@pytest.mark.parametrize("cfg", REPLAY_CONFIGS, ids=["defaults", "rds-row-id", "two-message-updates-many-failovers",
                                                     "one-message-updates-frequent-heartbeats", "alter-first"])
def test_replaying_the_emulator_gives_the_truth_at_every_heartbeat_and_transaction_end(cfg):
    story = build_dataworks_story(cfg)
    heartbeats, ends, duplicates, schema_changes, final = replay(story)
    assert heartbeats == [t for t, _ in story.heartbeats] and len(heartbeats) >= 2
    assert ends == story.transaction_ends and len(ends) == cfg.transactions
    assert_same(final, story.state_after(story.log[-1][0]), "end of story")
    assert [(s.kind, s.table) for s in schema_changes] == [("ALTER", ORDERS)]
    if story.injected.get("duplicate"):
        assert duplicates > 0


def test_the_emulator_covers_every_case_it_promises():
    story = build_dataworks_story(DataWorksConfig(seed=1))
    docs = [json.loads(m.value) for m in story.messages]
    ops = [d["payload"]["op"] for d in docs]
    for op in ("INSERT", "UPDATE_BEFOR", "UPDATE_AFTER", "DELETE", "TRANSACTION_BEGIN", "TRANSACTION_END",
               "MHEARTBEAT", "ALTER"):
        assert op in ops, op
    combined = [d for d in docs if d["payload"]["op"] == "UPDATE_AFTER" and d["payload"]["before"] is not None]
    split = [d for d in docs if d["payload"]["op"] == "UPDATE_BEFOR"]
    assert combined and split
    assert {d["schema"]["source"]["tableName"] for d in combined + split} == {ORDERS, AUDIT}
    assert any(d["schema"]["primaryKey"] is None for d in docs if d["payload"]["op"] == "INSERT")
    assert story.injected["duplicate"]
    # re-sent messages are duplicates by sequenceId and op, not by bytes
    keys = [(d["payload"]["sequenceId"], d["payload"]["op"]) for d in docs if d["payload"]["sequenceId"]]
    assert len(keys) > len(set(keys))
    assert len({m.value for m in story.messages}) > len(set(keys)) + 1
    rows = [r for d in docs for img in ("before", "after") if d["payload"][img] for r in [d["payload"][img]["dataColumn"]]]
    assert any(isinstance(r.get("receipt"), str) and r["receipt"] for r in rows)  # BYTES as Base64
    assert any(isinstance(r.get("created"), int) for r in rows)  # DATE as epoch ms
    truth = story.state_after(story.log[-1][0])
    assert any(isinstance(r["receipt"], bytes) for r in truth[ORDERS].values())
    assert all(isinstance(r["at"], dt.datetime) for r in truth[AUDIT].values())
    # event times strictly increase over the original messages (re-sent ones repeat earlier
    # times), except the two halves of an update, which share one sequenceId and one time
    originals = [json.loads(m.value)["payload"] for m in story.messages if not m.note.endswith("(re-sent)")]
    for p1, p2 in zip(originals, originals[1:]):
        t1, t2 = p1["timestamp"]["eventTime"], p2["timestamp"]["eventTime"]
        pair = (p1["op"], p2["op"]) == ("UPDATE_BEFOR", "UPDATE_AFTER") and p1["sequenceId"] == p2["sequenceId"]
        assert t1 == t2 if pair else t1 < t2
    assert story.heartbeats[0][1] is not None


def test_the_emulator_is_deterministic():
    a, b = build_dataworks_story(DataWorksConfig(seed=7)), build_dataworks_story(DataWorksConfig(seed=7))
    assert a.messages == b.messages and a.log == b.log and a.heartbeats == b.heartbeats
    assert build_dataworks_story(DataWorksConfig(seed=8)).messages != a.messages


def test_state_after_none_is_empty_and_bounds_are_inclusive():
    story = build_dataworks_story(DataWorksConfig(seed=1))
    assert story.state_after(None) == {ORDERS: {}, AUDIT: {}}
    first_key, _, table, key, row = story.log[0]
    assert story.state_after(first_key)[table] == {key: row}
    assert story.state_after((0, first_key[1], 0))[table] == {}  # just before it
