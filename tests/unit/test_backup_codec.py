"""Backup message codec: the seed's key, changelog and row vectors verbatim, round trips,
cross-checks against plain fastavro, and bad input with exact error types and messages."""

from __future__ import annotations

import copy
import datetime as dt
import importlib.util
import io
import random

import fastavro
import pytest

from resources.codecs import backup
from resources.codecs.backup import (
    CHANGELOG_SCHEMA,
    KEY_SCHEMA,
    MESSAGE_TYPE_CHANGELOG,
    MESSAGE_TYPE_DATA,
    BackupKey,
    ChangelogRecord,
    UnsupportedCodecError,
    check_writer_schema,
    decode_backup_key,
    encode_backup_key,
    encode_changelog,
    encode_rows,
    iter_changelog,
    iter_rows,
    row_avro_schema,
    writer_schema,
)
from resources.codecs.ddl import CreateTable, parse_ddl, replay_changelog
from resources.codecs.types import Column, to_float32
from resources.errors import BadAvroKeyError, BadContainerFileError, Location, SchemaMismatchError
from tests.support.seed_vectors import (
    SEED_CHANGELOG_RECORDS,
    SEED_CHANGELOG_SCHEMA,
    SEED_KEY_RECORD,
    SEED_KEY_SCHEMA,
    SEED_ROW_RECORDS,
    SEED_ROW_SCHEMA,
    SEED_ROWS_CANONICAL,
    TABLE1_ADQM_DDL,
)

HAVE_SNAPPY = importlib.util.find_spec("cramjam") is not None
CODECS = ["null", "deflate", pytest.param("snappy", marks=pytest.mark.skipif(
    not HAVE_SNAPPY, reason="snappy needs cramjam (fastavro[snappy])"))]

# ---- seed vectors, verbatim (the rest are in tests/support/seed_vectors.py)

SEED_KEY = BackupKey(
    "f81d4fae-7dec-11d0-a765-00a0c91e6bf6", 0, "marketing", 55, 1638360336000000, "stores",
    1, 2, 4, False,
)
# INSERT INTO sourcedb.table1_adqm VALUES (1, false, 32768, 65537, 1280000, 3.141526,
# 2.718281828, 'char_value', 'varchar_value','12345678-1234-abcd-ef00-1234567899ab',
# 'https://www.google.com', '1970-01-11', '13:10:30', '1970-01-01 13:10:30');
TABLE1_ADQM_ROW = {
    "id": 1, "boolean_col": False, "int32_col": 32768, "int_col": 65537, "bigint_col": 1280000,
    "float_col": to_float32(3.141526), "double_col": 2.718281828, "char_col": "char_value",
    "varchar_col": "varchar_value", "uuid_col": "12345678-1234-abcd-ef00-1234567899ab",
    "link_col": "https://www.google.com", "date_col": dt.date(1970, 1, 11),
    "time_col": dt.time(13, 10, 30), "timestamp_col": dt.datetime(1970, 1, 1, 13, 10, 30),
    "sys_op": 0,
}


def sales_columns() -> tuple[Column, ...]:
    return replay_changelog(SEED_CHANGELOG_RECORDS)["sales"].columns


def table1_columns() -> tuple[Column, ...]:
    stmt = parse_ddl(TABLE1_ADQM_DDL)
    assert isinstance(stmt, CreateTable)
    return stmt.columns


def block_ends(data: bytes) -> list[int]:
    """Byte offsets at which a container's header or one of its blocks ends."""
    blocks = list(fastavro.block_reader(io.BytesIO(data)))
    return [blocks[0].offset] + [b.offset + b.size for b in blocks]


def plain_fastavro(schema: dict, records: list[dict], codec: str = "null") -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(copy.deepcopy(schema)), records, codec=codec)
    return buf.getvalue()


# ---- key


def test_key_schema_is_the_seeds():
    assert KEY_SCHEMA == SEED_KEY_SCHEMA
    assert CHANGELOG_SCHEMA == SEED_CHANGELOG_SCHEMA


def test_seed_key_written_by_plain_fastavro_decodes():
    assert decode_backup_key(plain_fastavro(SEED_KEY_SCHEMA, [SEED_KEY_RECORD])) == SEED_KEY
    bare = io.BytesIO()
    fastavro.schemaless_writer(bare, fastavro.parse_schema(SEED_KEY_SCHEMA), SEED_KEY_RECORD)
    assert decode_backup_key(bare.getvalue()) == SEED_KEY


@pytest.mark.parametrize("container", [True, False])
def test_key_round_trip(container):
    changelog_key = BackupKey("id-2", MESSAGE_TYPE_CHANGELOG, "sourcedb", 0, 0, None, 1, 1, 1, True)
    for key in (SEED_KEY, changelog_key):
        data = encode_backup_key(key, container=container)
        assert data.startswith(b"Obj\x01") is container
        assert decode_backup_key(data) == key
    assert decode_backup_key(bytearray(encode_backup_key(SEED_KEY))) == SEED_KEY


def test_our_key_container_is_the_seed_schema_for_plain_readers():
    reader = fastavro.reader(io.BytesIO(encode_backup_key(SEED_KEY)))
    assert list(reader) == [SEED_KEY_RECORD]
    assert writer_schema(encode_backup_key(SEED_KEY))["name"] == "topicA"


def test_key_with_another_compatible_writer_schema():
    schema = copy.deepcopy(SEED_KEY_SCHEMA)
    schema["fields"].reverse()
    schema["fields"].append({"name": "extra", "type": "string"})
    schema["fields"][-2]["type"] = {"type": "string", "logicalType": "uuid"}  # incrementId
    date_field = next(f for f in schema["fields"] if f["name"] == "deltaDate")
    date_field["type"] = {"type": "long", "logicalType": "timestamp-micros"}  # inside: a datetime
    next(f for f in schema["fields"] if f["name"] == "streamNumber")["type"] = "int"
    data = plain_fastavro(schema, [dict(SEED_KEY_RECORD, extra="x")])
    assert decode_backup_key(data) == SEED_KEY


def key_error(data) -> str:
    with pytest.raises(BadAvroKeyError) as info:
        decode_backup_key(data)
    assert info.value.kind == "bad_avro_key" and info.value.location is None
    return str(info.value)


def test_bad_keys_exact_messages():
    assert key_error(b"") == "bad_avro_key: key is empty"
    assert key_error("text") == "bad_avro_key: key is str, expected bytes"
    assert key_error(b"hello") == (
        "bad_avro_key: neither an Avro container file (no b'Obj\\x01' magic) nor a bare key "
        "record: EOFError: Expected 52 bytes, read 4"
    )
    bare = encode_backup_key(SEED_KEY, container=False)
    assert key_error(bare + b"\x00") == (
        "bad_avro_key: neither an Avro container file (no b'Obj\\x01' magic) nor a bare key "
        "record: 1 bytes left after the record"
    )
    two = plain_fastavro(SEED_KEY_SCHEMA, [SEED_KEY_RECORD, SEED_KEY_RECORD])
    assert key_error(two) == "bad_avro_key: key container holds 2 records, expected exactly 1"
    none = plain_fastavro(SEED_KEY_SCHEMA, [])
    assert key_error(none) == "bad_avro_key: key container holds 0 records, expected exactly 1"
    bad_type = dict(SEED_KEY_RECORD, messageType=7)
    assert key_error(plain_fastavro(SEED_KEY_SCHEMA, [bad_type])) == (
        "bad_avro_key: messageType 7 is neither 0 (table data) nor 1 (changelog)"
    )


@pytest.mark.parametrize("field, value, reason", [
    ("chunkNumber", 2**63 - 1, "chunkNumber 9223372036854775807 is outside -9223372036854775808..1000000000"),
    ("streamTotal", 1_000_001, "streamTotal 1000001 is outside -9223372036854775808..1000000"),
    ("streamNumber", 2**40, "streamNumber 1099511627776 is outside -9223372036854775808..1000000"),
    ("deltaNum", -1, "deltaNum -1 is outside 0..1000000000"),
    ("deltaNum", 2**63 - 1, "deltaNum 9223372036854775807 is outside 0..1000000000"),
    ("deltaDate", 2**63 - 1, "deltaDate 9223372036854775807 is outside -62135596800000000..253402300799999999"),
])
def test_numbers_no_writer_can_send_make_a_bad_key(field, value, reason):
    data = plain_fastavro(SEED_KEY_SCHEMA, [dict(SEED_KEY_RECORD, **{field: value})])
    with pytest.raises(BadAvroKeyError) as info:  # a bad key, counted under its own kind
        decode_backup_key(data)
    assert info.value.kind == "bad_key_number"
    assert str(info.value) == f"bad_key_number: {reason} (limits: resources/codecs/limits.py)"


def test_numbers_at_the_limits_and_below_one_are_keys():
    # Below 1: a writer numbering from 0 sends them; the completeness ledger reports them.
    for fields in ({"chunkNumber": 1_000_000_000, "streamTotal": 1_000_000, "deltaNum": 1_000_000_000},
                   {"chunkNumber": 0, "streamNumber": -5, "streamTotal": 0, "deltaNum": 0}):
        key = decode_backup_key(plain_fastavro(SEED_KEY_SCHEMA, [dict(SEED_KEY_RECORD, **fields)]))
        assert (key.chunk_number, key.delta_num) == (fields["chunkNumber"], fields["deltaNum"])


def test_key_writer_schema_checked():
    schema = copy.deepcopy(SEED_KEY_SCHEMA)
    del schema["fields"][3]  # deltaNum
    record = {k: v for k, v in SEED_KEY_RECORD.items() if k != "deltaNum"}
    assert key_error(plain_fastavro(schema, [record])) == (
        "bad_avro_key: key writer schema has no field 'deltaNum'"
    )
    schema = copy.deepcopy(SEED_KEY_SCHEMA)
    schema["fields"][3]["type"] = "string"
    record = dict(SEED_KEY_RECORD, deltaNum="55")
    assert key_error(plain_fastavro(schema, [record])) == (
        "bad_avro_key: key field 'deltaNum' has Avro type \"string\", expected int or long"
    )
    schema = copy.deepcopy(SEED_KEY_SCHEMA)
    schema["fields"][1]["type"] = ["null", "long"]
    record = dict(SEED_KEY_RECORD, messageType=None)
    assert key_error(plain_fastavro(schema, [record])) == "bad_avro_key: key field 'messageType' is null"


def test_truncated_or_corrupted_keys_always_raise_bad_avro_key():
    for data in (encode_backup_key(SEED_KEY), encode_backup_key(SEED_KEY, container=False)):
        for cut in range(1, len(data)):
            with pytest.raises(BadAvroKeyError):
                decode_backup_key(data[:cut])
        rnd = random.Random(7)
        for _ in range(500):
            flipped = bytearray(data)
            flipped[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
            try:
                assert isinstance(decode_backup_key(bytes(flipped)), BackupKey)
            except BadAvroKeyError:
                pass


def test_key_error_gets_located_by_the_caller():
    with pytest.raises(BadAvroKeyError) as info:
        decode_backup_key(b"")
    located = info.value.located(Location(topic="backup", partition=0, offset=9), part="key")
    assert str(located) == "bad_avro_key (key) at topic 'backup' partition 0 offset 9: key is empty"


# ---- changelog


def test_seed_changelog_written_by_plain_fastavro():
    data = plain_fastavro(SEED_CHANGELOG_SCHEMA, SEED_CHANGELOG_RECORDS)
    records = list(iter_changelog(data))
    assert records == [
        ChangelogRecord(r["changeNum"], r["entityName"], r["changeQuery"])
        for r in SEED_CHANGELOG_RECORDS
    ]
    assert list(replay_changelog(records)) == ["sales"]


@pytest.mark.parametrize("codec", CODECS)
def test_changelog_round_trip(codec):
    records = [ChangelogRecord(r["changeNum"], r["entityName"], r["changeQuery"])
               for r in SEED_CHANGELOG_RECORDS]
    records.append(ChangelogRecord(3, "комментарий", "CREATE VIEW v AS SELECT 'ё' AS x"))
    data = encode_changelog(records, codec=codec)
    assert writer_schema(data) == SEED_CHANGELOG_SCHEMA
    assert fastavro.reader(io.BytesIO(data)).codec == codec
    assert list(iter_changelog(data)) == records


def test_changelog_schema_checked():
    schema = copy.deepcopy(SEED_CHANGELOG_SCHEMA)
    schema["fields"][2]["type"] = ["null", "string"]
    with pytest.raises(SchemaMismatchError) as info:
        iter_changelog(plain_fastavro(schema, SEED_CHANGELOG_RECORDS))
    assert str(info.value) == (
        "schema_mismatch: changelog field 'changeQuery' is [\"null\", \"string\"] in the writer "
        "schema, expected 'string'"
    )
    del schema["fields"][0]
    with pytest.raises(SchemaMismatchError, match="changelog writer schema has no field 'changeNum'"):
        iter_changelog(plain_fastavro(schema, [{"entityName": "e", "changeQuery": "q"}]))


# ---- rows


def test_row_schema_matches_the_seeds_example():
    assert row_avro_schema(sales_columns(), logical_types=False) == SEED_ROW_SCHEMA
    with_logical = row_avro_schema(sales_columns())
    assert with_logical["fields"][1] == {
        "name": "transaction_date",
        "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
        "doc": "",
    }


def test_seed_rows_written_by_plain_fastavro():
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)
    assert writer_schema(data) == SEED_ROW_SCHEMA
    assert list(iter_rows(data)) == SEED_ROW_RECORDS  # raw, no DDL
    # With the DDL: the plain-long TIMESTAMP becomes a naive UTC datetime.
    assert list(iter_rows(data, sales_columns())) == SEED_ROWS_CANONICAL


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("logical_types", [True, False])
def test_seed_rows_round_trip(codec, logical_types):
    data = encode_rows(sales_columns(), SEED_ROWS_CANONICAL, logical_types=logical_types, codec=codec)
    assert fastavro.reader(io.BytesIO(data)).codec == codec
    assert list(iter_rows(data, sales_columns())) == SEED_ROWS_CANONICAL


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("logical_types", [True, False])
def test_table1_adqm_every_type_round_trip(codec, logical_types):
    columns = table1_columns()
    nulls = {c.name: None for c in columns} | {"sys_op": 1}
    other = dict(TABLE1_ADQM_ROW, id=2, char_col="ёжик", varchar_col="Покупка по акции 1+1 ✓",
                 uuid_col="ffffffff-0000-4000-8000-000000000000", float_col=to_float32(-0.1),
                 date_col=dt.date(1969, 12, 31), time_col=dt.time(23, 59, 59, 999999),
                 timestamp_col=dt.datetime(1900, 1, 1, 0, 0, 0, 1))
    rows = [TABLE1_ADQM_ROW, nulls, other]
    data = encode_rows(columns, rows, logical_types=logical_types, codec=codec)
    assert list(iter_rows(data, columns)) == rows


def test_table1_adqm_values_as_written_on_the_wire():
    columns = table1_columns()
    raw = next(iter_rows(encode_rows(columns, [TABLE1_ADQM_ROW], logical_types=False)))
    assert (raw["date_col"], raw["time_col"], raw["timestamp_col"]) == (10, 47430000000, 47430000000)
    # With logical types, fastavro's own objects come back without the DDL...
    decoded = next(iter_rows(encode_rows(columns, [TABLE1_ADQM_ROW])))
    assert decoded["date_col"] == dt.date(1970, 1, 11)
    assert decoded["timestamp_col"] == dt.datetime(1970, 1, 1, 13, 10, 30, tzinfo=dt.timezone.utc)
    # ... and the same canonical values with it.
    assert next(iter_rows(encode_rows(columns, [TABLE1_ADQM_ROW]), columns)) == TABLE1_ADQM_ROW


def test_uppercase_uuid_in_plain_string_is_lowercased():
    columns = (Column("u", "uuid"),)
    data = plain_fastavro(row_avro_schema(columns, logical_types=False),
                          [{"u": "ABCDEF00-1234-ABCD-EF00-1234567899AB", "sys_op": 0}])
    assert list(iter_rows(data, columns)) == [{"u": "abcdef00-1234-abcd-ef00-1234567899ab", "sys_op": 0}]


def test_rows_stream_record_by_record_across_blocks():
    columns = sales_columns()
    rows = [dict(SEED_ROWS_CANONICAL[i % 2], id=i) for i in range(2000)]
    data = encode_rows(columns, iter(rows), codec="deflate", sync_interval=2000)
    assert len(block_ends(data)) > 10
    stream = iter_rows(data, columns)
    assert next(stream) == rows[0]
    assert list(stream) == rows[1:]


def test_schema_evolution_ddl_column_absent_from_writer():
    columns = sales_columns() + (Column("added_later", "varchar"),)
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)
    assert list(iter_rows(data, columns)) == SEED_ROWS_CANONICAL


def test_lossless_widenings_accepted():
    columns = (Column("i", "int32"), Column("f", "float"), Column("d", "date"), Column("t", "timestamp"))
    schema = {"type": "record", "name": "row", "fields": [
        {"name": "i", "type": ["null", "long"]},
        {"name": "f", "type": ["null", "double"]},
        {"name": "d", "type": ["null", "long"]},
        {"name": "t", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]},
        {"name": "sys_op", "type": ["null", "int"]},
    ]}
    data = plain_fastavro(schema, [{"i": 5, "f": 0.1, "d": 1, "t": 1, "sys_op": 0}])
    assert list(iter_rows(data, columns)) == [{
        "i": 5, "f": to_float32(0.1), "d": dt.date(1970, 1, 2),
        "t": dt.datetime(1970, 1, 1, 0, 0, 0, 1), "sys_op": 0,
    }]


def mismatch(schema: dict, columns) -> str:
    with pytest.raises(SchemaMismatchError) as info:
        check_writer_schema(schema, columns)
    return str(info.value)


def test_writer_schema_mismatching_ddl_exact_messages():
    columns = sales_columns()

    def with_field(name, avro_t):
        schema = copy.deepcopy(SEED_ROW_SCHEMA)
        for f in schema["fields"]:
            if f["name"] == name:
                f["type"] = avro_t
                return schema
        schema["fields"].insert(0, {"name": name, "type": avro_t, "doc": ""})
        return schema

    assert mismatch(with_field("color", ["null", "string"]), columns) == (
        "schema_mismatch: writer field 'color' is not a column in the changelog DDL (columns: id, "
        "transaction_date, product_code, product_units, store_id, description)"
    )
    assert mismatch(with_field("id", ["null", "string"]), columns) == (
        "schema_mismatch: writer field 'id' has Avro type [\"null\", \"string\"], which cannot "
        "hold DDL type int"
    )
    assert mismatch(with_field("id", ["null", "int"]), columns) == (
        "schema_mismatch: writer field 'id' has Avro type [\"null\", \"int\"], which cannot "
        "hold DDL type int"
    )
    millis = ["null", {"type": "long", "logicalType": "timestamp-millis"}]
    assert mismatch(with_field("transaction_date", millis), columns) == (
        "schema_mismatch: writer field 'transaction_date' has Avro type [\"null\", "
        "{\"logicalType\": \"timestamp-millis\", \"type\": \"long\"}], which cannot hold DDL type timestamp"
    )
    assert mismatch(with_field("description", ["null", "string", "long"]), columns).startswith(
        "schema_mismatch: writer field 'description' has Avro type [\"null\", \"string\", \"long\"]"
    )
    no_sys_op = copy.deepcopy(SEED_ROW_SCHEMA)
    no_sys_op["fields"].pop()
    assert mismatch(no_sys_op, columns) == "schema_mismatch: writer schema has no sys_op field"
    assert mismatch(with_field("sys_op", ["null", "string"]), columns) == (
        "schema_mismatch: sys_op has Avro type [\"null\", \"string\"], expected int"
    )
    assert mismatch({"type": "array", "items": "long"}, columns).startswith(
        "schema_mismatch: writer schema is not a record: "
    )


def test_iter_rows_checks_schema_before_any_record():
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)
    with pytest.raises(SchemaMismatchError, match="writer field 'store_id' is not a column"):
        iter_rows(data, sales_columns()[:4])


def test_value_out_of_range_mid_stream_is_a_mismatch():
    columns = (Column("t", "time"),)
    data = plain_fastavro(row_avro_schema(columns, logical_types=False),
                          [{"t": 1, "sys_op": 0}, {"t": 86_400_000_000, "sys_op": 0}])
    stream = iter_rows(data, columns)
    assert next(stream) == {"t": dt.time(0, 0, 0, 1), "sys_op": 0}
    with pytest.raises(SchemaMismatchError) as info:
        next(stream)
    assert str(info.value) == (
        "schema_mismatch: column 't': time of day 86400000000 µs is outside 0..86399999999"
    )


def test_encode_rows_rejects_bad_rows():
    columns = sales_columns()
    with pytest.raises(ValueError, match=r"row has keys that are not columns: \['color'\]"):
        encode_rows(columns, [{"id": 1, "color": "red", "sys_op": 0}])
    with pytest.raises(ValueError, match="sys_op must be 0, 1 or None, got 2"):
        encode_rows(columns, [{"id": 1, "sys_op": 2}])
    with pytest.raises(ValueError, match="codec 'zstd' is not one of"):
        encode_rows(columns, [], codec="zstd")


# ---- bad containers


def container_error(data, columns=None) -> BadContainerFileError:
    with pytest.raises(BadContainerFileError) as info:
        list(iter_rows(data, columns))
    assert info.value.kind == "bad_container_file" and info.value.location is None
    return info.value


def test_not_a_container():
    assert str(container_error(b"")) == "bad_container_file: row container is empty"
    assert str(container_error(b"{\"id\": 1}")) == (
        "bad_container_file: row container is not an Avro Object Container File "
        "(starts with b'{\"id', not b'Obj\\x01')"
    )
    assert str(container_error(b"Obj\x01")) == (
        "bad_container_file: unreadable row container header: ValueError: cannot read header - is it an avro file?"
    )
    with pytest.raises(BadContainerFileError, match="changelog container is empty"):
        iter_changelog(b"")
    with pytest.raises(BadContainerFileError, match="container is not an Avro Object Container"):
        writer_schema(b"nope")


def test_truncated_container_cut_in_half():
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)
    header_len = len(plain_fastavro(SEED_ROW_SCHEMA, []))
    half = data[: header_len + (len(data) - header_len) // 2]
    error = container_error(half, sales_columns())
    assert str(error) == (
        "bad_container_file: truncated or corrupt row container after 0 records: "
        "EOFError: Expected 138 bytes, read 75"
    )
    changelog = plain_fastavro(SEED_CHANGELOG_SCHEMA, SEED_CHANGELOG_RECORDS)
    with pytest.raises(BadContainerFileError, match="truncated or corrupt changelog container after 0"):
        list(iter_changelog(changelog[: len(changelog) // 2 + 200]))


def test_error_raised_mid_iteration_after_good_records():
    columns = sales_columns()
    rows = [dict(SEED_ROWS_CANONICAL[0], id=i) for i in range(500)]
    data = encode_rows(columns, rows, sync_interval=1000)
    stream = iter_rows(data[:-40], columns)
    seen = []
    with pytest.raises(BadContainerFileError, match=r"truncated or corrupt row container after \d+ records"):
        for row in stream:
            seen.append(row)
    assert 0 < len(seen) < 500 and seen == rows[: len(seen)]


@pytest.mark.parametrize("codec", CODECS)
def test_fuzzed_containers_raise_only_typed_errors(codec):
    columns = table1_columns()
    rows = [dict(TABLE1_ADQM_ROW, id=i) for i in range(40)]
    data = encode_rows(columns, rows, codec=codec, sync_interval=300)
    ends = block_ends(data)
    assert len(ends) > 3
    for cut in range(len(data)):
        try:
            got = list(iter_rows(data[:cut], columns))
        except (BadContainerFileError, SchemaMismatchError):
            continue
        # Undetectable by design: a cut exactly between blocks is a shorter valid file.
        assert cut in ends and got == rows[: len(got)]
    rnd = random.Random(11)
    for _ in range(1500):
        flipped = bytearray(data)
        flipped[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
        try:
            list(iter_rows(bytes(flipped), columns))
            list(iter_rows(bytes(flipped)))
        except (BadContainerFileError, SchemaMismatchError):
            pass


def test_snappy_without_its_library(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        backup.importlib.util, "find_spec",
        lambda name, *a: None if name in ("cramjam", "snappy") else real_find_spec(name, *a),
    )
    with pytest.raises(UnsupportedCodecError, match="codec 'snappy' needs the 'cramjam' package"):
        encode_rows(sales_columns(), [], codec="snappy")


@pytest.mark.skipif(not HAVE_SNAPPY, reason="snappy needs cramjam (fastavro[snappy])")
def test_snappy_written_by_plain_fastavro():
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS, codec="snappy")
    assert list(iter_rows(data, sales_columns())) == SEED_ROWS_CANONICAL


def test_sync_marker_makes_output_deterministic():
    marker = bytes(range(16))
    columns = sales_columns()
    records = [ChangelogRecord(0, "e", "CREATE DATABASE e")]
    for encode in (
        lambda m: encode_backup_key(SEED_KEY, sync_marker=m),
        lambda m: encode_changelog(records, sync_marker=m),
        lambda m: encode_rows(columns, SEED_ROWS_CANONICAL, sync_marker=m),
    ):
        assert encode(marker) == encode(marker)
        assert encode(None) != encode(None)  # Avro's default: a random marker per file
        assert marker in encode(marker)
    with pytest.raises(ValueError, match="sync_marker must be 16 bytes, got 3"):
        encode_rows(columns, [], sync_marker=b"abc")


def test_message_type_constants():
    assert (MESSAGE_TYPE_DATA, MESSAGE_TYPE_CHANGELOG) == (0, 1)
