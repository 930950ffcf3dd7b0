"""The Qlik codec against seeds/002, and the Qlik emulator replayed through it.

About the seed's vectors: seeds/002 (Qlik's "Metadata and data messages", machine-translated to
Russian) has no JSON example at all, so there are no comma typos to correct here. Its one worked
example is the change mask: "0B hex = 1011 binary: the columns with ordinals 1, 2 and 4 were
changed", with "10 data columns occupy bits 0..9"; it is tested verbatim. Its field tables are
turned into messages field by field, with the field names exactly as the seed spells them
(schemaId, lineage.tableVersion, tableStructure.tableColumns, primaryKeyPosition, dataSchema,
headers.changeSequence, changeMask, columnMask, externalSchemaId, transactionEventCounter,
transactionLastEvent, data, beforeData). The translation renders REFRESH as "ОБНОВЛЕНИЕ"
("insert of a record during full load"), the same word as UPDATE; the operation codes themselves
are Qlik's: REFRESH, INSERT, UPDATE, DELETE.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal

import fastavro
import pytest

from resources.codecs.cdc import BEFORE_IMAGE, DELETE, UPSERT, Change, TableSchema
from resources.codecs.qlik import (
    ENVELOPE_SCHEMA,
    QlikBadAvroError,
    QlikBadEnvelopeError,
    QlikBadJsonError,
    QlikBadMetadataError,
    QlikDecoder,
    QlikMissingMetadataError,
    QlikSchemaMismatchError,
    QlikUnknownOperationError,
)
from resources.codecs.qlik_values import (
    QlikBadMaskError,
    QlikBadValueError,
    base_type,
    decode_mask,
    encode_mask,
    order_key,
)
from resources.emulator.qlik import FORMATS, METADATA_SCHEMA, QlikConfig, build_qlik_story
from resources.errors import BadJsonError, Location

# ---------------------------------------------------------------------------------------------
# Messages built from the seed's field tables
# ---------------------------------------------------------------------------------------------

# Ten columns, as in the seed's "10 data columns occupy bits 0..9". The key is composite and
# listed in another order than the columns: primaryKeyPosition decides the key's order.
TEN = [
    ("REGION", "STRING", 10, 0, 0, 2), ("ID", "INT4", 4, 10, 0, 1), ("NAME", "WSTRING", 50, 0, 0, 0),
    ("AMOUNT", "NUMERIC", 0, 12, 2, 0), ("CREATED", "DATETIME", 8, 26, 6, 0), ("BORN", "DATE", 4, 0, 0, 0),
    ("ACTIVE", "BOOLEAN", 1, 0, 0, 0), ("RATIO", "REAL8", 8, 15, 0, 0), ("AT", "TIME", 8, 0, 0, 0),
    ("NOTES", "CLOB", 0, 0, 0, 0),
]


def metadata(version=1, columns=TEN, schema_id=None, table="ACCOUNTS", schema="BANK"):
    return {
        "schemaId": schema_id or f"ACCOUNTS-v{version}",
        "lineage": {"server": "qlik-srv-1", "task": "bank-to-kafka", "schema": schema, "table": table,
                    "tableVersion": version, "timestamp": "2024-05-06T10:00:00.000"},
        "tableStructure": {"tableColumns": {
            name: {"ordinal": i, "type": t, "length": ln, "precision": p, "scale": s, "primaryKeyPosition": k}
            for i, (name, t, ln, p, s, k) in enumerate(columns, start=1)
        }},
        "dataSchema": json.dumps({"type": "record", "name": "DataRecord", "fields": [
            {"name": "data", "type": {"type": "record", "name": "Data", "fields": [
                {"name": c[0], "type": ["null", "string"]} for c in columns]}},
        ]}),
    }


ROW = {"REGION": "EU", "ID": "2", "NAME": "Покупка по акции", "AMOUNT": "1234.50",
       "CREATED": "2024-05-06 10:01:02.123456", "BORN": "1990-02-28", "ACTIVE": "true", "RATIO": "0.25",
       "AT": "23:59:58.5", "NOTES": "a long text"}


def data_message(op="INSERT", data=ROW, before=None, seq="20240506100102120000000000000000017", **headers):
    h = {"operation": op, "changeSequence": seq, "timestamp": "2024-05-06T10:01:02.120",
         "streamPosition": "00000000.00bb2531.00000001.0000.02.0000:154.6963.16",
         "transactionId": "00000000000000000000000000060008", "changeMask": "FF01", "columnMask": "FF03",
         "transactionEventCounter": 3, "transactionLastEvent": True}
    h.update(headers)
    return {"schema": "BANK", "table": "ACCOUNTS", "headers": h, "data": data, "beforeData": before}


def enc(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def decoder_with(*bodies) -> QlikDecoder:
    d = QlikDecoder()
    for b in bodies or (metadata(),):
        d.decode(None, enc(b))
    return d


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------


def test_seed_mask_vector_0B_means_ordinals_1_2_and_4():
    assert decode_mask("0B", 10) == {1, 2, 4}
    assert decode_mask("0b", 10) == {1, 2, 4}


def test_ten_columns_occupy_bits_0_to_9_least_significant_byte_first():
    assert decode_mask("FF03", 10) == set(range(1, 11))
    assert decode_mask("0001", 10) == {9}  # byte 1, bit 0 = bit 8 = ordinal 9
    assert decode_mask("0002", 10) == {10}
    assert decode_mask("0000", 10) == frozenset()
    assert decode_mask(bytes([0x0B, 0x02]), 10) == {1, 2, 4, 10}
    assert decode_mask(None, 10) is None and decode_mask("", 10) is None


@pytest.mark.parametrize("ordinals,count,text", [({1, 2, 4}, 10, "0B00"), (set(range(1, 11)), 10, "FF03"),
                                                 ({1}, 1, "01"), ({8, 9}, 9, "8001"), (set(), 3, "00")])
def test_encode_mask_is_the_inverse(ordinals, count, text):
    assert encode_mask(ordinals, count) == text
    assert decode_mask(text, count) == ordinals


@pytest.mark.parametrize("mask,count,reason", [
    ("0004", 10, "sets bit 10, but the table has 10 columns"),
    ("0B", 3, "sets bit 3, but the table has 3 columns"),
    ("B", 10, "odd number of hex digits"),
    ("0G", 10, "not hexadecimal"),
    (11, 10, "must be a hex string"),
])
def test_a_mask_that_does_not_fit_is_a_typed_error(mask, count, reason):
    with pytest.raises(QlikBadMaskError, match=reason) as info:
        decode_mask(mask, count)
    assert info.value.kind == "qlik_bad_mask"


# ---------------------------------------------------------------------------------------------
# Metadata messages
# ---------------------------------------------------------------------------------------------


def test_metadata_message_gives_the_table_schema():
    [ts] = QlikDecoder().decode(None, enc(metadata()))
    assert isinstance(ts, TableSchema)
    assert (ts.source, ts.namespace, ts.table, ts.version) == ("qlik", "BANK", "ACCOUNTS", 1)
    assert ts.columns == (("REGION", "STRING(10)"), ("ID", "INT4"), ("NAME", "WSTRING(50)"),
                          ("AMOUNT", "NUMERIC(12,2)"), ("CREATED", "DATETIME"), ("BORN", "DATE"),
                          ("ACTIVE", "BOOLEAN"), ("RATIO", "REAL8"), ("AT", "TIME"), ("NOTES", "CLOB"))
    assert ts.key_columns == ("ID", "REGION")  # by primaryKeyPosition, not by ordinal
    assert ts.raw == json.loads(metadata()["dataSchema"])
    assert base_type("NUMERIC(12,2)") == "NUMERIC"


def test_columns_listed_out_of_ordinal_order_are_sorted_by_ordinal():
    md = metadata()
    cols = md["tableStructure"]["tableColumns"]
    md["tableStructure"]["tableColumns"] = dict(reversed(list(cols.items())))
    [ts] = QlikDecoder().decode(None, enc(md))
    assert [c for c, _ in ts.columns] == [c[0] for c in TEN]


@pytest.mark.parametrize("mutate,reason", [
    (lambda m: m["tableStructure"]["tableColumns"]["ID"].update(ordinal=11), r"ordinals of ACCOUNTS must be 1\.\.10"),
    (lambda m: m["tableStructure"]["tableColumns"]["NAME"].update(primaryKeyPosition=1), "share a primaryKeyPosition"),
    (lambda m: m["lineage"].pop("tableVersion"), "tableVersion must be an integer"),
    (lambda m: m["lineage"].update(table=""), "lineage.table must be a non-empty string"),
    (lambda m: m["tableStructure"].update(tableColumns={}), "must be a non-empty object"),
    (lambda m: m["tableStructure"]["tableColumns"]["ID"].pop("type"), "needs an object with a string 'type'"),
    (lambda m: m.update(dataSchema="{not json"), "dataSchema of ACCOUNTS is not JSON"),
])
def test_bad_metadata_is_a_typed_error(mutate, reason):
    md = metadata()
    mutate(md)
    with pytest.raises(QlikBadMetadataError, match=reason):
        QlikDecoder().decode(None, enc(md))


# ---------------------------------------------------------------------------------------------
# Data messages
# ---------------------------------------------------------------------------------------------


def test_insert_gives_one_typed_upsert():
    [ch] = decoder_with().decode(None, enc(data_message()))
    assert isinstance(ch, Change) and ch.operation == UPSERT and ch.source_op == "INSERT"
    assert (ch.source, ch.namespace, ch.table, ch.key_columns) == ("qlik", "BANK", "ACCOUNTS", ("ID", "REGION"))
    assert ch.values == {
        "REGION": "EU", "ID": 2, "NAME": "Покупка по акции", "AMOUNT": Decimal("1234.50"),
        "CREATED": dt.datetime(2024, 5, 6, 10, 1, 2, 123456), "BORN": dt.date(1990, 2, 28), "ACTIVE": True,
        "RATIO": 0.25, "AT": dt.time(23, 59, 58, 500000), "NOTES": "a long text",
    }
    assert ch.captured == frozenset(c[0] for c in TEN)
    assert ch.order_key == (20240506100102120000000000000000017, "", 3, "")
    assert ch.transaction_id == "00000000000000000000000000060008" and ch.last_in_transaction is True
    assert ch.event_time_us == int(dt.datetime(2024, 5, 6, 10, 1, 2, 120000, tzinfo=dt.timezone.utc).timestamp() * 1e6)
    assert ch.event_id == "20240506100102120000000000000000017:3" and not ch.is_backfill
    assert ch.column_types["AMOUNT"] == "NUMERIC(12,2)"


def test_json_numbers_and_strings_give_the_same_values():
    # Replicate's JSON writes values as text ("ID": "2"); typed JSON must read the same.
    typed = {**ROW, "ID": 2, "AMOUNT": 1234.5, "ACTIVE": True, "RATIO": 0.25}
    a = decoder_with().decode(None, enc(data_message()))[0].values
    b = decoder_with().decode(None, enc(data_message(data=typed)))[0].values
    assert a == b


def test_refresh_is_a_backfill_upsert_without_cdc_headers():
    msg = data_message("REFRESH", seq="", transactionId="", timestamp="", streamPosition="", changeMask=None,
                       columnMask=None, transactionEventCounter=None, transactionLastEvent=None)
    [ch] = decoder_with().decode(None, enc(msg))
    assert ch.operation == UPSERT and ch.is_backfill and ch.source_op == "REFRESH"
    assert ch.captured is None and ch.transaction_id is None and ch.last_in_transaction is None
    assert ch.event_time_us is None
    assert ch.order_key == (-2, "", 0, 'BANK.ACCOUNTS:{"ID": 2, "REGION": "EU"}')  # no sequence: the row's identity
    assert ch.order_key < order_key("0")  # full load sorts before every CDC change


def test_update_with_before_data_gives_a_before_image_then_the_upsert():
    before = {**ROW, "NAME": "старое имя", "AMOUNT": "1.00"}
    msg = data_message("UPDATE", before=before, changeMask="0C00")  # NAME (3) and AMOUNT (4) changed
    img, up = decoder_with().decode(None, enc(msg))
    assert (img.operation, up.operation) == (BEFORE_IMAGE, UPSERT)
    assert img.values["NAME"] == "старое имя" and img.values["AMOUNT"] == Decimal("1.00")
    assert up.values["NAME"] == "Покупка по акции"
    assert img.order_key == up.order_key and img.event_id == up.event_id + "#before"


def test_a_column_whose_columnMask_bit_is_0_is_not_captured_and_not_a_null():
    # Oracle without full supplemental logging: only the key and NAME were captured. The other
    # columns come as JSON null, which must never overwrite a stored value.
    data = {c: None for c in ROW} | {"REGION": "EU", "ID": "2", "NAME": "новое"}
    msg = data_message("UPDATE", data=data, changeMask="0400", columnMask="0700")
    [ch] = decoder_with().decode(None, enc(msg))
    assert ch.captured == {"REGION", "ID", "NAME"}
    assert ch.values == {"REGION": "EU", "ID": 2, "NAME": "новое"}


def test_a_captured_null_is_a_real_null():
    msg = data_message("UPDATE", data={**ROW, "NOTES": None}, changeMask="0000", columnMask="FF03")
    [ch] = decoder_with().decode(None, enc(msg))
    assert "NOTES" in ch.captured and ch.values["NOTES"] is None


def test_delete_carries_only_the_key_columns():
    msg = data_message("DELETE", changeMask="0300", columnMask="FF03")
    [ch] = decoder_with().decode(None, enc(msg))
    assert ch.operation == DELETE and ch.values == {"ID": 2, "REGION": "EU"}
    assert ch.captured == {"ID", "REGION"}
    only_keys = data_message("DELETE", data={"REGION": "EU", "ID": "2"}, changeMask="0300", columnMask="0300")
    assert decoder_with().decode(None, enc(only_keys))[0].values == {"ID": 2, "REGION": "EU"}


def test_order_key_compares_numeric_sequences_as_numbers():
    assert order_key("9") < order_key("10")
    assert order_key("20240506100102120000000000000000017") < order_key("20240506100102120000000000000000018")
    assert order_key("00042") == order_key("42")
    assert order_key("abc") < order_key("abd") and order_key("abc", 1) < order_key("abc", 2)
    assert order_key("17", 1) < order_key("17", 2) < order_key("18", 1)
    assert order_key(None, None, "x") < order_key("abc") < order_key("0")


def test_the_replicate_json_envelope_is_accepted():
    # The shape of Replicate's JSON envelope (Qlik's public pages; not in the seed), own values.
    d = QlikDecoder()
    [ts] = d.decode(None, enc({"magic": "atMSG", "type": "MD", "headers": None, "messageSchemaId": None,
                               "messageSchema": None, "message": metadata()}))
    env = {"magic": "atMSG", "type": "DT", "headers": None, "messageSchemaId": None, "messageSchema": None,
           "message": data_message()}
    [ch] = d.decode(None, enc(env))
    assert ch.table == "ACCOUNTS" and ch.values["ID"] == 2


def test_a_data_message_follows_its_own_table_version():
    v2_columns = TEN + [("EMAIL", "STRING", 80, 0, 0, 0)]
    d = decoder_with(metadata(1), metadata(2, v2_columns))
    assert d.table("BANK", "ACCOUNTS").version == 2
    # externalSchemaId pins version 1: 10 columns, so bit 10 would not fit.
    old = data_message(externalSchemaId="ACCOUNTS-v1", columnMask="FF07")
    with pytest.raises(QlikBadMaskError):
        d.decode(None, enc(old))
    [ch] = d.decode(None, enc(data_message(externalSchemaId="ACCOUNTS-v2", data={**ROW, "EMAIL": "a@b.c"},
                                           columnMask="FF07")))
    assert ch.values["EMAIL"] == "a@b.c"
    [ch] = d.decode(None, enc(data_message(externalSchemaId="ACCOUNTS-v1")))
    assert "EMAIL" not in ch.column_types
    [ch] = d.decode(None, enc(data_message()))  # by name: the latest version
    assert "EMAIL" in ch.column_types and "EMAIL" not in ch.captured


def test_a_message_without_table_names_is_found_by_its_schema_id():
    msg = data_message(externalSchemaId="ACCOUNTS-v1")
    del msg["schema"], msg["table"]
    [ch] = decoder_with().decode(None, enc(msg))
    assert (ch.namespace, ch.table) == ("BANK", "ACCOUNTS")


def test_tombstone_gives_nothing():
    assert QlikDecoder().decode(b"k", None) == []


# ---------------------------------------------------------------------------------------------
# Avro forms
# ---------------------------------------------------------------------------------------------

AVRO_DATA_SCHEMA = {"type": "record", "name": "DataRecord", "fields": [
    {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
    {"name": "headers", "type": {"type": "record", "name": "Headers", "fields": [
        {"name": "operation", "type": "string"}, {"name": "changeSequence", "type": "string"},
        {"name": "timestamp", "type": "string"}, {"name": "transactionId", "type": "string"},
        {"name": "changeMask", "type": ["null", "string"]}, {"name": "columnMask", "type": ["null", "string"]},
        {"name": "transactionEventCounter", "type": ["null", "long"]},
        {"name": "transactionLastEvent", "type": ["null", "boolean"]}]}},
    {"name": "data", "type": {"type": "record", "name": "Data", "fields": [
        {"name": "ID", "type": "int"}, {"name": "NAME", "type": ["null", "string"]},
        {"name": "AMOUNT", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}]},
        {"name": "CREATED", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]}]}},
    {"name": "beforeData", "type": ["null", "Data"]},
]}
SMALL = [("ID", "INT4", 4, 10, 0, 1), ("NAME", "STRING", 20, 0, 0, 0), ("AMOUNT", "NUMERIC", 0, 12, 2, 0),
         ("CREATED", "DATETIME", 8, 26, 6, 0)]
AVRO_ROW = {"schema": "BANK", "table": "SMALL",
            "headers": {"operation": "INSERT", "changeSequence": "7", "timestamp": "2024-05-06T10:01:02.000",
                        "transactionId": "T1", "changeMask": "0F", "columnMask": "0F",
                        "transactionEventCounter": 1, "transactionLastEvent": True},
            "data": {"ID": 5, "NAME": "ёлка", "AMOUNT": Decimal("9.99"),
                     "CREATED": dt.datetime(2024, 5, 6, 10, 0, tzinfo=dt.timezone.utc)},
            "beforeData": None}


def small_metadata():
    md = metadata(1, SMALL, schema_id="SMALL-1", table="SMALL")
    md["dataSchema"] = json.dumps(AVRO_DATA_SCHEMA)
    return md


def container(schema, records) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), records)
    return buf.getvalue()


def binary(schema, record) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def envelope(kind, message: bytes, schema_id=None, schema=None) -> bytes:
    return binary(ENVELOPE_SCHEMA, {"magic": b"atMSG", "type": kind, "headers": None, "messageSchemaId": schema_id,
                                    "messageSchema": schema, "message": message})


EXPECTED_SMALL = {"ID": 5, "NAME": "ёлка", "AMOUNT": Decimal("9.99"), "CREATED": dt.datetime(2024, 5, 6, 10, 0)}


def test_avro_container_file_with_the_json_forms_fields():
    d = decoder_with(small_metadata())
    [ch] = d.decode(None, container(AVRO_DATA_SCHEMA, [AVRO_ROW]))
    assert ch.values == EXPECTED_SMALL and ch.order_key == (7, "", 1, "")


def test_replicate_binary_envelope_data_by_message_schema_id():
    d = decoder_with(small_metadata())
    [ch] = d.decode(None, envelope("DT", binary(AVRO_DATA_SCHEMA, AVRO_ROW), schema_id="SMALL-1"))
    assert ch.values == EXPECTED_SMALL
    with pytest.raises(QlikMissingMetadataError, match="messageSchemaId 'SMALL-9'"):
        d.decode(None, envelope("DT", binary(AVRO_DATA_SCHEMA, AVRO_ROW), schema_id="SMALL-9"))


def test_replicate_binary_envelope_metadata_by_embedded_or_given_schema():
    md = {**small_metadata(), "lineage": {**small_metadata()["lineage"]}}
    body = binary(METADATA_SCHEMA, md)
    [ts] = QlikDecoder().decode(None, envelope("MD", body, schema=json.dumps(METADATA_SCHEMA)))
    assert ts.table == "SMALL" and ts.key_columns == ("ID",)
    # Only an id: the schema must be known to the decoder (Replicate's own metadata schema, say).
    [again] = QlikDecoder(message_schemas={"MD-1": METADATA_SCHEMA}).decode(None, envelope("MD", body, schema_id="MD-1"))
    assert again == ts
    with pytest.raises(QlikMissingMetadataError, match="messageSchemaId 'MD-1'"):
        QlikDecoder().decode(None, envelope("MD", body, schema_id="MD-1"))
    with pytest.raises(QlikBadEnvelopeError, match="neither messageSchema nor messageSchemaId"):
        QlikDecoder().decode(None, envelope("MD", body))


@pytest.mark.parametrize("fmt", FORMATS)
def test_emulated_metadata_reads_the_same_in_every_format(fmt):
    story = build_qlik_story(QlikConfig(seed=3, transactions=2, format=fmt))
    [ts] = QlikDecoder().decode(None, story.messages[1].value)
    assert ts.table == "ORDER_LINES" and ts.key_columns == ("ORDER_ID", "LINE_NO")
    assert ts.columns[-1] == ("NOTE", "CLOB")


# ---------------------------------------------------------------------------------------------
# Bad input: one exact error type each
# ---------------------------------------------------------------------------------------------


def test_broken_json():
    with pytest.raises(QlikBadJsonError) as info:
        QlikDecoder().decode(None, b'{"headers": {"operation": "INSERT",')
    assert isinstance(info.value, BadJsonError) and info.value.kind == "qlik_bad_json"
    assert info.value.location is None
    with pytest.raises(QlikBadJsonError):
        QlikDecoder().decode(None, b"\xff\xfe{}")


@pytest.mark.parametrize("obj,reason", [
    ([1, 2], "a Qlik message is a JSON object"),
    ({"foo": 1}, "neither a metadata message"),
    ({**metadata(), "headers": {}, "data": {}}, "both a metadata message"),
    ({"magic": "xxMSG", "type": "DT", "message": {}}, "envelope magic"),
    ({"magic": "atMSG", "type": "XX", "message": {}}, "envelope type is 'XX'"),
    ({"magic": "atMSG", "type": "MD", "message": data_message()}, "envelope type MD but the message is a data"),
    ({"magic": "atMSG", "type": "DT", "message": "text"}, "envelope message must be a JSON object"),
    ({k: v for k, v in data_message(externalSchemaId=None).items() if k not in ("schema", "table")}, "names no table"),
    ({**data_message(), "headers": "INSERT", "data": {}}, "headers must be an object"),
    (data_message(transactionLastEvent="maybe"), "transactionLastEvent must be a boolean"),
    (data_message(transactionEventCounter="x"), "transactionEventCounter must be an integer"),
    ({**data_message(), "data": [1]}, "data of a INSERT must be an object"),
])
def test_wrong_envelope(obj, reason):
    with pytest.raises(QlikBadEnvelopeError, match=reason) as info:
        decoder_with().decode(None, enc(obj))
    assert info.value.kind == "qlik_bad_envelope"


def test_data_before_its_metadata():
    with pytest.raises(QlikMissingMetadataError, match="before any metadata message of that table") as info:
        QlikDecoder().decode(None, enc(data_message()))
    assert info.value.kind == "qlik_no_metadata"
    with pytest.raises(QlikMissingMetadataError, match="schema id 'ACCOUNTS-v7'"):
        decoder_with().decode(None, enc(data_message(externalSchemaId="ACCOUNTS-v7")))


@pytest.mark.parametrize("op", ["UPSERT", "insert", "", None, "BEFORE_IMAGE"])
def test_unknown_operation(op):
    with pytest.raises(QlikUnknownOperationError, match="is none of REFRESH, INSERT, UPDATE, DELETE") as info:
        decoder_with().decode(None, enc(data_message(op)))
    assert info.value.kind == "qlik_unknown_operation"


@pytest.mark.parametrize("headers", [{"columnMask": "FF07"}, {"changeMask": "0004"}, {"columnMask": "FF0"}])
def test_mask_that_does_not_fit_the_table(headers):
    with pytest.raises(QlikBadMaskError):
        decoder_with().decode(None, enc(data_message(**headers)))


@pytest.mark.parametrize("msg,reason", [
    (data_message(data={**ROW, "GHOST": 1}), r"has columns \['GHOST'\] not in tableVersion 1"),
    (data_message(data={k: v for k, v in ROW.items() if k != "NAME"}), "NAME .* is captured .* but absent"),
    (data_message(data={**ROW, "ID": None}), r"no value for key column\(s\) \['ID'\]"),
    (data_message("DELETE", columnMask="0100"), "key columns not all set in columnMask"),
])
def test_data_that_does_not_fit_its_metadata(msg, reason):
    with pytest.raises(QlikSchemaMismatchError, match=reason):
        decoder_with().decode(None, enc(msg))


@pytest.mark.parametrize("msg,reason", [
    (data_message(data={**ROW, "ID": "two"}), r"column ID \(INT4\)"),
    (data_message(data={**ROW, "AMOUNT": "1,5"}), r"column AMOUNT \(NUMERIC\(12,2\)\)"),
    (data_message(data={**ROW, "BORN": "28.02.1990"}), r"column BORN \(DATE\)"),
    (data_message(data={**ROW, "ACTIVE": "yes"}), r"column ACTIVE \(BOOLEAN\)"),
    (data_message(timestamp="yesterday"), "headers.timestamp"),
])
def test_values_that_do_not_fit_their_type(msg, reason):
    with pytest.raises(QlikBadValueError, match=reason):
        decoder_with().decode(None, enc(msg))


def test_bad_avro():
    good = container(AVRO_DATA_SCHEMA, [AVRO_ROW])
    with pytest.raises(QlikBadAvroError, match="unreadable Avro container file"):
        decoder_with(small_metadata()).decode(None, good[: len(good) - 20])
    env = envelope("DT", binary(AVRO_DATA_SCHEMA, AVRO_ROW), schema_id="SMALL-1")
    with pytest.raises(QlikBadAvroError):
        decoder_with(small_metadata()).decode(None, env[:-3])
    with pytest.raises(QlikBadAvroError, match="bytes after the Replicate envelope"):
        decoder_with(small_metadata()).decode(None, env + b"\x00")


def test_a_failed_message_leaves_the_learned_structures_as_they_were():
    # One container file: a good metadata record, then a bad one. Nothing of it may stick.
    good = {**metadata(1, SMALL, schema_id="SMALL-1", table="SMALL"), "dataSchema": "{}"}
    bad = json.loads(json.dumps(good))
    bad["tableStructure"]["tableColumns"]["ID"]["ordinal"] = 9
    d = QlikDecoder()
    with pytest.raises(QlikBadMetadataError):
        d.decode(None, container(METADATA_SCHEMA, [good, bad]))
    assert d.table("BANK", "SMALL") is None and d.table_by_schema_id("SMALL-1") is None
    [ts] = d.decode(None, container(METADATA_SCHEMA, [good]))
    assert d.table("BANK", "SMALL").table_schema == ts


def test_errors_get_their_location_from_the_reader():
    with pytest.raises(QlikUnknownOperationError) as info:
        decoder_with().decode(None, enc(data_message("MERGE")))
    err = info.value.located(Location(topic="qlik", partition=0, offset=41), "value")
    assert str(err).startswith("qlik_unknown_operation (value) at topic 'qlik' partition 0 offset 41: operation 'MERGE'")


# ---------------------------------------------------------------------------------------------
# The emulator, replayed through the decoder
# ---------------------------------------------------------------------------------------------


def replay(story, *, honour_captured=True):
    """Decode every message; de-duplicate by order key; skip before-images; upsert only the
    captured columns; delete by key; on a new table version, existing rows gain its new columns
    as NULL. Returns {transaction end order key: state at that point}."""
    decoder, seen, state, at_ends = QlikDecoder(), set(), {t: {} for t in story.tables}, {}
    for m in story.messages:
        for rec in decoder.decode(m.key, m.value):
            if isinstance(rec, TableSchema):
                names = [c for c, _ in rec.columns]
                state[rec.table] = {k: {c: r.get(c) for c in names} for k, r in state[rec.table].items()}
                continue
            if rec.operation == BEFORE_IMAGE or rec.order_key in seen:
                continue
            seen.add(rec.order_key)
            rows = state[rec.table]
            key = tuple(rec.values[k] for k in rec.key_columns)
            if rec.operation == DELETE:
                rows.pop(key, None)
            elif honour_captured:
                captured = rec.values.keys() if rec.captured is None else rec.captured
                rows[key] = {**rows.get(key, {}), **{c: rec.values[c] for c in captured}}
            else:  # what a reader that ignores columnMask would do: every absent column becomes NULL
                rows[key] = {c: None for c in rec.column_types} | rec.values
            if rec.last_in_transaction:
                at_ends[rec.order_key] = {t: {k: dict(r) for k, r in rs.items()} for t, rs in state.items()}
    return at_ends


@pytest.mark.parametrize("cfg", [
    QlikConfig(seed=1),
    QlikConfig(seed=2, format="json-envelope", transactions=40, duplicate_rate=0.3),
    QlikConfig(seed=3, format="avro", external_schema_id=False),
    QlikConfig(seed=4, format="avro-envelope", uncaptured_rate=0.8, ddl_at_transaction=1, rollback_at_transaction=0),
    QlikConfig(seed=5, external_schema_id=False, refresh_rows=0, duplicate_rate=0.5),
], ids=["json", "json-envelope-dups", "avro-by-name", "avro-envelope-early-ddl", "json-by-name-no-full-load"])
def test_replaying_the_emulated_topic_gives_the_truth_at_every_transaction_end(cfg):
    story = build_qlik_story(cfg)
    at_ends = replay(story)
    assert sorted(at_ends) == story.transaction_ends
    for end in story.transaction_ends:
        assert at_ends[end] == story.state_after(end), f"state differs at transaction end {end}"
    for quirk in ("duplicate", "rollback", "uncaptured", "ddl"):
        assert story.injected.get(quirk), f"the story has no {quirk!r}"


def test_applying_uncaptured_nulls_would_lose_data():
    story = build_qlik_story(QlikConfig(seed=1))
    naive = replay(story, honour_captured=False)
    assert any(naive[e] != story.state_after(e) for e in story.transaction_ends)


def test_same_seed_same_story():
    a, b = build_qlik_story(QlikConfig(seed=9)), build_qlik_story(QlikConfig(seed=9))
    assert a.messages == b.messages and a.transaction_ends == b.transaction_ends and a.log == b.log
    assert build_qlik_story(QlikConfig(seed=10)).messages != a.messages
    assert build_qlik_story(QlikConfig(seed=9, format="avro")).log == a.log  # same story in every format


def test_the_rolled_back_transaction_nets_to_nothing():
    story = build_qlik_story(QlikConfig(seed=6, rollback_at_transaction=5))
    ends = story.transaction_ends
    assert story.state_after(ends[4]) == story.state_after(ends[5])
    [(changes,)] = story.injected["rollback"]
    assert changes >= 4


def test_emulated_headers_follow_the_seed():
    story = build_qlik_story(QlikConfig(seed=7, transactions=30))
    seqs, by_txn = [], {}
    dedup = {m.value: m for m in story.messages}.values()
    lob = {"NOTE"}
    for m in dedup:
        body = json.loads(m.value)
        if "lineage" in body:
            continue
        h = body["headers"]
        if h["operation"] == "REFRESH":
            assert h["changeSequence"] == "" and h["changeMask"] is None and h["transactionLastEvent"] is None
            continue
        seqs.append(int(h["changeSequence"]))
        by_txn.setdefault(h["transactionId"], []).append((h["transactionEventCounter"], h["transactionLastEvent"]))
        names = list(body["data"])
        changed = {names[o - 1] for o in decode_mask(h["changeMask"], len(names))}
        captured = {names[o - 1] for o in decode_mask(h["columnMask"], len(names))}
        keys = {"ID"} if body["table"] == "CUSTOMERS" else {"ORDER_ID", "LINE_NO"}
        assert not changed & lob
        if h["operation"] == "INSERT":
            assert changed == set(names) - lob and captured == set(names)
        elif h["operation"] == "DELETE":
            assert changed == keys and keys <= captured
        else:
            assert keys <= captured and changed <= captured and body["beforeData"] is not None
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for events in by_txn.values():
        assert [c for c, _ in events] == list(range(1, len(events) + 1))
        assert [last for _, last in events] == [False] * (len(events) - 1) + [True]


def test_the_story_is_the_same_in_every_process():
    """PYTHONHASHSEED must not change the story (sets are never iterated while drawing)."""
    import os
    import subprocess
    import sys

    code = ("import hashlib; from resources.emulator.qlik import build_qlik_story, QlikConfig; "
            "s = build_qlik_story(QlikConfig(seed=5)); "
            "print(hashlib.sha256(b''.join((m.value or b'') for m in s.messages)).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3)}
    assert len(digests) == 1
