"""Native (polars) decode of table-data values to Arrow, cross-checked against fastavro.

The reference is `backup.iter_rows(data, columns)`: every test asserts that `rows_to_arrow`
gives the same rows (or the same kind of error), and whether the native path or the fastavro
fallback produced them. The "why the fallbacks exist" section pins the polars 1.44.2 behaviours
the module works around: if one of those tests fails after a polars upgrade, the workaround in
resources/codecs/arrow_rows.py may be removable (re-measure, then simplify).
"""

from __future__ import annotations

import copy
import datetime as dt
import importlib.util
import io

import fastavro
import polars as pl
import pyarrow as pa
import pytest
from polars.exceptions import PanicException

from resources.codecs.arrow_rows import (
    _read_header,
    _via_fastavro,
    arrow_schema,
    rows_to_arrow,
    rows_to_arrow_many,
)
from resources.codecs.backup import encode_rows, iter_rows, row_avro_schema
from resources.codecs.types import Column, avro_raw_value, to_float32
from resources.errors import BadContainerFileError, DecodeError, SchemaMismatchError
from tests.support.seed_vectors import SALES_COLUMNS as SALES
from tests.support.seed_vectors import SEED_ROW_RECORDS, SEED_ROW_SCHEMA, SEED_ROWS_CANONICAL

HAVE_SNAPPY = importlib.util.find_spec("cramjam") is not None
NEEDS_SNAPPY = pytest.mark.skipif(not HAVE_SNAPPY, reason="writing snappy needs cramjam")
CODECS = ["null", "deflate", pytest.param("snappy", marks=NEEDS_SNAPPY)]

# Every Prostore type: the seed's sourcedb.table1_adqm.
ALL_TYPES = (
    Column("id", "bigint", nullable=False),
    Column("boolean_col", "boolean"),
    Column("int32_col", "int32"),
    Column("int_col", "int"),
    Column("bigint_col", "bigint"),
    Column("float_col", "float"),
    Column("double_col", "double"),
    Column("char_col", "char", 10),
    Column("varchar_col", "varchar"),
    Column("uuid_col", "uuid"),
    Column("link_col", "link"),
    Column("date_col", "date"),
    Column("time_col", "time"),
    Column("timestamp_col", "timestamp"),
)
ALL_TYPES_ROWS = [
    # the seed's INSERT INTO sourcedb.table1_adqm VALUES (...)
    {"id": 1, "boolean_col": False, "int32_col": 32768, "int_col": 65537, "bigint_col": 1280000,
     "float_col": to_float32(3.141526), "double_col": 2.718281828, "char_col": "char_value",
     "varchar_col": "varchar_value", "uuid_col": "12345678-1234-abcd-ef00-1234567899ab",
     "link_col": "https://www.google.com", "date_col": dt.date(1970, 1, 11),
     "time_col": dt.time(13, 10, 30), "timestamp_col": dt.datetime(1970, 1, 1, 13, 10, 30),
     "sys_op": 0},
    {"id": 2, "sys_op": 1},  # every other column null
    {"id": 3, "boolean_col": True, "int32_col": -(2**31), "int_col": -(2**63),
     "bigint_col": 2**63 - 1, "float_col": to_float32(3.4e38),
     "double_col": -1.7976931348623157e308,
     "char_col": "ключ 😀", "varchar_col": "Покупка по акции 1+1 — 日本語 \x00 tab\t",
     "uuid_col": "ffffffff-0000-4000-8000-00000000000a", "link_col": "",
     "date_col": dt.date(1, 1, 1), "time_col": dt.time(0, 0),
     "timestamp_col": dt.datetime(1, 1, 1), "sys_op": 0},
    {"id": 4, "boolean_col": None, "int32_col": 2**31 - 1, "int_col": 0, "bigint_col": -1,
     "float_col": float("inf"), "double_col": -0.0, "char_col": None, "varchar_col": "é",
     "uuid_col": None, "link_col": "http://пример.рф/путь?q=1", "date_col": dt.date(9999, 12, 31),
     "time_col": dt.time(23, 59, 59, 999999),
     "timestamp_col": dt.datetime(9999, 12, 31, 23, 59, 59, 999999), "sys_op": None},
    {"id": 5, "float_col": to_float32(-1.5e-45), "double_col": 5e-324,
     "date_col": dt.date(1969, 12, 31), "timestamp_col": dt.datetime(1969, 12, 31, 23, 59, 59, 1),
     "sys_op": 0},
] + [
    {"id": 100 + i, "int32_col": i, "varchar_col": f"строка {i}" * (i % 4),
     "timestamp_col": dt.datetime(2021, 2, 25) + dt.timedelta(microseconds=i * 123_456_789),
     "time_col": dt.time(i % 24, i % 60, i % 60, i), "sys_op": i % 2}
    for i in range(200)
]


# ---- helpers


def names(columns) -> list[str]:
    return [c.name for c in columns] + ["sys_op"]


def reference(data: bytes, columns) -> list[dict]:
    """The fastavro path: canonical Python values, every DDL column (absent ones null)."""
    return [{n: row.get(n) for n in names(columns)} for row in iter_rows(data, columns)]


def decode(data: bytes, columns) -> tuple[pa.Table, list[str]]:
    fallbacks: list[str] = []
    table = rows_to_arrow(data, columns, on_fallback=fallbacks.append)
    assert table.schema == arrow_schema(columns)
    return table, fallbacks


def assert_native_equals_reference(data: bytes, columns) -> pa.Table:
    table, fallbacks = decode(data, columns)
    assert fallbacks == [], "expected the native path"
    assert table.to_pylist() == reference(data, columns)
    assert table.equals(_via_fastavro(data, columns))  # same Arrow, not only same values
    return table


def assert_same_error(data: bytes, columns) -> DecodeError:
    with pytest.raises(DecodeError) as expected:
        reference(data, columns)
    with pytest.raises(type(expected.value)) as got:
        rows_to_arrow(data, columns)
    return got.value


def plain_fastavro(schema: dict, records: list[dict], codec: str = "null", **kw) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(copy.deepcopy(schema)), records, codec=codec, **kw)
    return buf.getvalue()


def one_field_schema(avro_type, name: str = "x") -> dict:
    return {"type": "record", "name": "row", "fields": [
        {"name": name, "type": avro_type}, {"name": "sys_op", "type": ["null", "int"]}]}


def block_spans(data: bytes) -> list[tuple[int, int]]:
    header = _read_header(data)
    return [(b.offset, b.offset + b.size) for b in fastavro.block_reader(io.BytesIO(data))] \
        if len(data) > header.end else []


# ---- the seed


@pytest.mark.parametrize("codec", CODECS)
def test_seed_row_vector_written_by_plain_fastavro(codec):
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS, codec)
    table = assert_native_equals_reference(data, SALES)
    assert table.to_pylist() == SEED_ROWS_CANONICAL
    assert table.schema.field("transaction_date").type == pa.timestamp("us")  # no zone
    assert table.schema.field("sys_op").type == pa.int32()


# The seed's two records in one snappy block (written by fastavro + cramjam, frozen here so the
# native snappy path is tested where cramjam is not installed): count, size, data, CRC32.
SEED_SNAPPY_BLOCK = bytes.fromhex(
    "0484028a01f05202de8a7a0280b28ee9ec8ade050212414243313032313031020402f2e8d7b9070244d09fd0"
    "bed0bad183d0bfd0bad0b020d0bfd0be20d0b0d0bad186d0b8d0b820312b31020002e08a7a0280b6fe95cf8e"
    "de05114634303031020202f6a9d6b9070240d03a460044b1d0b5d0b720d0b0d0bad186d0b8d0b902026d0329"
    "8e"
)


def test_seed_snappy_container_decodes_natively_without_cramjam():
    sync = b"deltaport-seed-1"
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(SEED_ROW_SCHEMA), [], sync_marker=sync)
    header = buf.getvalue().replace(b"\x14avro.codec\x08null", b"\x14avro.codec\x0csnappy")
    data = header + SEED_SNAPPY_BLOCK + sync
    table, fallbacks = decode(data, SALES)
    assert fallbacks == []
    assert table.to_pylist() == SEED_ROWS_CANONICAL
    if HAVE_SNAPPY:
        assert table.to_pylist() == reference(data, SALES)


def test_seed_row_vector_through_encode_rows_without_logical_types():
    data = encode_rows(SALES, SEED_ROWS_CANONICAL, logical_types=False)
    assert_native_equals_reference(data, SALES)
    assert rows_to_arrow(data, SALES).to_pylist() == SEED_ROWS_CANONICAL


# ---- every type, every codec, with and without logical types


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("logical_types", [True, False], ids=["logical", "plain"])
@pytest.mark.parametrize("sync_interval", [200, 16_000], ids=["many-blocks", "one-block"])
def test_every_type_matches_fastavro(codec, logical_types, sync_interval):
    data = encode_rows(ALL_TYPES, ALL_TYPES_ROWS, logical_types=logical_types, codec=codec,
                       sync_interval=sync_interval)
    table = assert_native_equals_reference(data, ALL_TYPES)
    assert table.num_rows == len(ALL_TYPES_ROWS)
    expected = [{n: row.get(n) for n in names(ALL_TYPES)} for row in ALL_TYPES_ROWS]
    assert table.to_pylist() == expected
    assert [f.type for f in table.schema] == [
        pa.int64(), pa.bool_(), pa.int32(), pa.int64(), pa.int64(), pa.float32(), pa.float64(),
        pa.string(), pa.string(), pa.string(), pa.string(), pa.date32(), pa.time64("us"),
        pa.timestamp("us"), pa.int32(),
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_empty_container(codec):
    for logical_types in (True, False):
        data = encode_rows(ALL_TYPES, [], logical_types=logical_types, codec=codec)
        assert block_spans(data) == []  # header only
        table = assert_native_equals_reference(data, ALL_TYPES)
        assert table.num_rows == 0


def test_logical_type_beside_the_type_as_in_the_key_schema():
    # Where Avro readers ignore it: the value is a plain long of µs, on both paths.
    schema = {"type": "record", "name": "row", "fields": [
        {"name": "ts", "type": "long", "logicalType": "timestamp-micros"},
        {"name": "ts2", "type": ["null", "long"], "logicalType": "timestamp-micros"},
        {"name": "d", "type": ["null", "int"], "logicalType": "date"},
        {"name": "sys_op", "type": ["null", "int"]},
    ]}
    columns = (Column("ts", "timestamp"), Column("ts2", "timestamp"), Column("d", "date"))
    data = plain_fastavro(schema, [
        {"ts": 1614269474000000, "ts2": None, "d": 10, "sys_op": 0},
        {"ts": -1, "ts2": 1638360336000000, "d": None, "sys_op": 1},
    ])
    table = assert_native_equals_reference(data, columns)
    assert table.column("ts").to_pylist() == [
        dt.datetime(2021, 2, 25, 16, 11, 14), dt.datetime(1969, 12, 31, 23, 59, 59, 999999)]
    assert table.column("d").to_pylist() == [dt.date(1970, 1, 11), None]


@pytest.mark.parametrize("codec", CODECS)
def test_unions_in_either_order_and_bare_types(codec):
    schema = row_avro_schema(ALL_TYPES)
    for i, field in enumerate(schema["fields"]):
        null, avro_t = field["type"]
        # alternate: ["T", "null"], bare "T" (not nullable), ["null", "T"]
        field["type"] = [[avro_t, null], avro_t, [null, avro_t]][i % 3]
    bare = {f["name"] for f in schema["fields"] if not isinstance(f["type"], list)}
    full = ALL_TYPES_ROWS[0]
    rows = [full, ALL_TYPES_ROWS[2],  # every value set; then every nullable field null:
            {k: v for k, v in full.items() if k in bare} | {"sys_op": None}]
    records = [
        {c.name: avro_raw_value(c, row.get(c.name)) for c in ALL_TYPES}
        | {"sys_op": row.get("sys_op")}
        for row in rows
    ]
    data = plain_fastavro(schema, records, codec)
    assert_native_equals_reference(data, ALL_TYPES)


def test_doc_default_aliases_and_namespaces_are_ignored():
    schema = {"type": "record", "name": "row", "namespace": "prostore.backup", "doc": "таблица",
              "aliases": ["old_row"], "fields": [
                  {"name": "id", "type": ["null", "long"], "doc": "ключ", "default": None,
                   "aliases": ["key"], "order": "descending"},
                  {"name": "sys_op", "type": ["null", "int"], "doc": "", "default": None},
              ]}
    data = plain_fastavro(schema, [{"id": 7, "sys_op": 0}], metadata={"writer": "prostore"})
    assert assert_native_equals_reference(data, [Column("id", "bigint")]).to_pylist() == [
        {"id": 7, "sys_op": 0}]


# ---- writer schema vs DDL


def test_writer_field_order_does_not_matter_output_is_ddl_order():
    schema = row_avro_schema(SALES, logical_types=False)
    schema["fields"].reverse()  # sys_op first, id last
    data = plain_fastavro(schema, SEED_ROW_RECORDS)
    table = assert_native_equals_reference(data, SALES)
    assert table.column_names == names(SALES)
    assert table.to_pylist() == SEED_ROWS_CANONICAL


def test_schema_evolution_a_ddl_column_the_writer_lacks_is_all_null():
    # The table gained columns after this message was written.
    ddl = SALES + (Column("discount", "double"), Column("sold_on", "date"))
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)
    table = assert_native_equals_reference(data, ddl)
    assert table.column("discount").type == pa.float64()
    assert table.column("sold_on").type == pa.date32()
    assert table.column("discount").null_count == 2 == table.column("sold_on").null_count
    assert table.column_names == names(ddl)


def test_a_writer_field_not_in_the_ddl_is_a_schema_mismatch():
    data = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)
    error = assert_same_error(data, SALES[:-1])  # no "description" in this DDL
    assert isinstance(error, SchemaMismatchError)
    assert "'description' is not a column in the changelog DDL" in str(error)


def test_a_writer_type_that_cannot_hold_the_ddl_type_is_a_schema_mismatch():
    schema = copy.deepcopy(SEED_ROW_SCHEMA)
    schema["fields"][0]["type"] = ["null", "string"]  # id INT written as a string
    data = plain_fastavro(schema, [dict(SEED_ROW_RECORDS[0], id="1000111")])
    assert isinstance(assert_same_error(data, SALES), SchemaMismatchError)


def test_no_sys_op_is_a_schema_mismatch():
    schema = {"type": "record", "name": "row", "fields": [{"name": "id", "type": "long"}]}
    data = plain_fastavro(schema, [{"id": 1}])
    error = assert_same_error(data, SALES)
    assert str(error).endswith("writer schema has no sys_op field")


def test_wider_writer_types_that_hold_the_ddl_type():
    # int32 in a long, float in a double, date as a long of days, sys_op as a long.
    schema = {"type": "record", "name": "row", "fields": [
        {"name": "i", "type": ["null", "long"]},
        {"name": "f", "type": ["null", "double"]},
        {"name": "d", "type": ["null", "long"]},
        {"name": "sys_op", "type": ["null", "long"]},
    ]}
    columns = (Column("i", "int32"), Column("f", "float"), Column("d", "date"))
    data = plain_fastavro(schema, [
        {"i": -(2**31), "f": 0.1, "d": -719_162, "sys_op": 0},
        {"i": 2**31 - 1, "f": 3.4028235e38, "d": 2_932_896, "sys_op": 1},
        {"i": None, "f": None, "d": None, "sys_op": None},
    ])
    table = assert_native_equals_reference(data, columns)
    assert table.column("f").to_pylist()[0] == to_float32(0.1)
    assert table.column("d").to_pylist()[:2] == [dt.date(1, 1, 1), dt.date(9999, 12, 31)]


@pytest.mark.parametrize("avro_type, column, value", [
    (["null", "long"], Column("x", "int32"), 2**31),
    (["null", "double"], Column("x", "float"), 1e39),
    (["null", "long"], Column("x", "date"), 2_932_897),
    (["null", "int"], Column("x", "date"), -719_163),
    (["null", {"type": "int", "logicalType": "date"}], Column("x", "date"), 2**30),
    (["null", "long"], Column("x", "time"), 86_400_000_000),
    (["null", "long"], Column("x", "time"), -1),
    (["null", {"type": "long", "logicalType": "time-micros"}], Column("x", "time"),
     86_400_000_000),
    (["null", "long"], Column("x", "timestamp"), 253_402_300_800_000_000),
    (["null", {"type": "long", "logicalType": "timestamp-micros"}], Column("x", "timestamp"),
     -(2**62)),
])
def test_a_value_outside_its_column_raises_like_fastavro(avro_type, column, value):
    # A good row first: the bad value is not the first thing either decoder meets.
    data = plain_fastavro(one_field_schema(avro_type), [{"x": 1, "sys_op": 0},
                                                       {"x": value, "sys_op": 0}])
    assert_same_error(data, [column])
    fallbacks: list[str] = []
    with pytest.raises(DecodeError):
        rows_to_arrow(data, [column], on_fallback=fallbacks.append)
    assert fallbacks and fallbacks[0].startswith("column 'x': ")


def test_sys_op_written_as_a_long_beyond_int32():
    schema = {"type": "record", "name": "row", "fields": [{"name": "sys_op", "type": "long"}]}
    data = plain_fastavro(schema, [{"sys_op": 2**40}])
    with pytest.raises(SchemaMismatchError, match="sys_op"):
        rows_to_arrow(data, [])


# ---- uuid spellings


def test_uuid_plain_string_is_lowercased_natively():
    data = plain_fastavro(one_field_schema(["null", "string"]), [
        {"x": "12345678-1234-ABCD-EF00-1234567899AB", "sys_op": 0},
        {"x": "not-a-uuid-but-a-plain-STRING", "sys_op": 0},
    ])
    table = assert_native_equals_reference(data, [Column("x", "uuid")])
    assert table.column("x").to_pylist() == [
        "12345678-1234-abcd-ef00-1234567899ab", "not-a-uuid-but-a-plain-string"]


def test_uuid_logical_type_in_canonical_form_is_native():
    data = plain_fastavro(one_field_schema(["null", {"type": "string", "logicalType": "uuid"}]),
                          [{"x": "12345678-1234-ABCD-EF00-1234567899AB", "sys_op": 0},
                           {"x": None, "sys_op": 0}])
    assert_native_equals_reference(data, [Column("x", "uuid")])


def test_uuid_logical_type_not_canonical_falls_back_to_fastavro():
    # fastavro reads logical uuids through uuid.UUID, which rewrites these spellings.
    schema = one_field_schema(["null", {"type": "string", "logicalType": "uuid"}])
    data = plain_fastavro(schema, [{"x": "{12345678-1234-abcd-ef00-1234567899ab}", "sys_op": 0},
                                   {"x": "12345678123412341234123456789ABC", "sys_op": 0}])
    table, fallbacks = decode(data, [Column("x", "uuid")])
    assert fallbacks == ["column 'x': a uuid is not in canonical form"]
    assert table.column("x").to_pylist() == [
        "12345678-1234-abcd-ef00-1234567899ab", "12345678-1234-1234-1234-123456789abc"]
    assert table.to_pylist() == reference(data, [Column("x", "uuid")])


def test_uuid_with_non_ascii_falls_back_to_fastavro():
    data = plain_fastavro(one_field_schema(["null", "string"]), [{"x": "İD-Σ", "sys_op": 0}])
    table, fallbacks = decode(data, [Column("x", "uuid")])
    assert fallbacks == ["column 'x': a uuid has non-ASCII characters"]
    assert table.to_pylist() == reference(data, [Column("x", "uuid")]) == [
        {"x": "İD-Σ".lower(), "sys_op": 0}]


# ---- codecs polars must not see


@pytest.mark.parametrize("codec", ["bzip2", "xz"])
def test_other_codecs_are_decoded_by_fastavro(codec):
    data = encode_rows_any_codec(ALL_TYPES, ALL_TYPES_ROWS[:5], codec)
    table, fallbacks = decode(data, ALL_TYPES)
    assert fallbacks == [f"codec {codec!r} is not decoded by polars"]
    assert table.to_pylist() == reference(data, ALL_TYPES)
    assert table.equals(_via_fastavro(data, ALL_TYPES))


def encode_rows_any_codec(columns, rows, codec: str) -> bytes:
    """encode_rows with any codec fastavro writes (encode_rows allows null, deflate, snappy)."""
    records = [{c.name: avro_raw_value(c, r.get(c.name)) for c in columns}
               | {"sys_op": r.get("sys_op")} for r in rows]
    return plain_fastavro(row_avro_schema(columns), records, codec)


# ---- bad input


@pytest.mark.parametrize("data, message", [
    (b"", "row container is empty"),
    ("Obj\x01", "row container is str, expected bytes"),
    (b"PK\x03\x04zip", "row container is not an Avro Object Container File"),
    (b"Obj\x01", "unreadable row container header"),
    (b"Obj\x01\x02\x16avro.schema\x04{}", "unreadable row container header"),
])
def test_not_a_container(data, message):
    with pytest.raises(BadContainerFileError, match=message):
        rows_to_arrow(data, SALES)


def test_a_header_that_is_not_avro_is_a_bad_container_not_a_mismatch():
    schema = copy.deepcopy(SEED_ROW_SCHEMA)
    schema["fields"][2]["type"] = ["null", "strnig"]  # unknown type name
    good = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)
    data = good.replace(b'"string"', b'"strnig"', 1)
    assert len(data) == len(good)
    error = assert_same_error(data, SALES)
    assert isinstance(error, BadContainerFileError)


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_errs_or_is_a_shorter_valid_file_like_fastavro(codec):
    data = encode_rows(ALL_TYPES, ALL_TYPES_ROWS[:40], codec=codec, sync_interval=300)
    block_ends = {end for _, end in block_spans(data)} | {_read_header(data).end}
    assert len(block_ends) > 4
    for cut in range(1, len(data)):
        short = data[:cut]
        if cut in block_ends:  # a container does not count its blocks: this is a valid file
            assert_native_equals_reference(short, ALL_TYPES)
        else:
            with pytest.raises(BadContainerFileError):
                rows_to_arrow(short, ALL_TYPES)
            with pytest.raises(BadContainerFileError):
                reference(short, ALL_TYPES)


def test_a_wrong_sync_marker_is_a_bad_container():
    data = bytearray(encode_rows(SALES, SEED_ROWS_CANONICAL * 50, sync_interval=300))
    _, end = block_spans(bytes(data))[0]
    data[end - 1] ^= 0xFF
    assert isinstance(assert_same_error(bytes(data), SALES), BadContainerFileError)


def test_trailing_bytes_after_the_last_block_are_a_bad_container():
    data = encode_rows(SALES, SEED_ROWS_CANONICAL)
    for tail in (b"\x00", b"garbage"):
        assert isinstance(assert_same_error(data + tail, SALES), BadContainerFileError)


def test_a_polars_panic_is_caught_and_the_value_is_a_bad_container():
    data = string_longer_than_its_block()
    with pytest.raises(PanicException):  # a BaseException, not an Exception
        pl.read_avro(io.BytesIO(data))
    fallbacks: list[str] = []
    with pytest.raises(BadContainerFileError, match="Expected 60 bytes"):
        rows_to_arrow(data, [Column("id", "bigint"), Column("v", "varchar")],
                      on_fallback=fallbacks.append)
    assert fallbacks[0].startswith("polars failed: PanicException")


def string_longer_than_its_block() -> bytes:
    """A block whose framing is intact but whose string says 60 bytes and has 3."""
    columns = [Column("id", "bigint"), Column("v", "varchar")]
    empty = encode_rows(columns, [])
    record = b"\x02\x02" + b"\x02\x78abc" + b"\x02\x00"  # id=1, v=<60 bytes: "abc">, sys_op=0
    return empty + b"\x02" + bytes([len(record) * 2]) + record + _read_header(empty).sync


@pytest.mark.parametrize("codec", CODECS)
def test_bit_flips_never_leak_anything_but_decode_errors(codec):
    data = encode_rows(ALL_TYPES, ALL_TYPES_ROWS[:12], codec=codec, sync_interval=400)
    start = _read_header(data).end
    for pos in range(start, len(data)):
        for bit in (0, 3, 7):
            bad = bytearray(data)
            bad[pos] ^= 1 << bit
            try:
                table = rows_to_arrow(bytes(bad), ALL_TYPES)
            except DecodeError:
                continue
            assert table.schema == arrow_schema(ALL_TYPES)


def test_invalid_encodings_polars_tolerates():
    """Corrupt-but-parsable bytes that polars reads without an error (documented, not fixed:
    detecting them needs a full second decode). A union branch index beyond the union is read
    as the value branch (fastavro refuses it); a boolean byte other than 0 or 1 reads False (as
    in Java Avro; fastavro reads True)."""
    columns = [Column("b", "boolean")]
    good = encode_rows(columns, [{"b": True, "sys_op": 0}])
    head = good[:_read_header(good).end]
    sync = _read_header(good).sync

    def one_block(record: bytes) -> bytes:
        return head + b"\x02" + bytes([len(record) * 2]) + record + sync

    union_index_3 = one_block(b"\x06\x01" + b"\x02\x00")
    with pytest.raises(BadContainerFileError):
        reference(union_index_3, columns)
    assert rows_to_arrow(union_index_3, columns).to_pylist() == [{"b": True, "sys_op": 0}]

    boolean_byte_2 = one_block(b"\x02\x02" + b"\x02\x00")
    assert reference(boolean_byte_2, columns) == [{"b": True, "sys_op": 0}]
    assert rows_to_arrow(boolean_byte_2, columns).to_pylist() == [{"b": False, "sys_op": 0}]


# ---- why the fallbacks exist (polars 1.44.2 behaviour, pinned)


@pytest.mark.parametrize("codec", ["bzip2", "xz"])
def test_polars_reads_bzip2_and_xz_as_garbage_without_an_error(codec):
    data = plain_fastavro(one_field_schema(["null", "long"]),
                          [{"x": 5, "sys_op": 0}, {"x": None, "sys_op": 1}], codec)
    frame = pl.read_avro(io.BytesIO(data))  # no error ...
    assert frame.rows() != [(5, 0), (None, 1)]  # ... but not the rows: the compressed bytes
    assert rows_to_arrow(data, [Column("x", "bigint")]).to_pylist() == [
        {"x": 5, "sys_op": 0}, {"x": None, "sys_op": 1}]


@pytest.mark.parametrize("codec", ["deflate", pytest.param("snappy", marks=NEEDS_SNAPPY)])
def test_polars_fails_on_a_compressed_container_without_records(codec):
    data = encode_rows(SALES, [], codec=codec)
    with pytest.raises((pl.exceptions.ComputeError, PanicException)):
        pl.read_avro(io.BytesIO(data))
    # ... so the module never hands polars a container without records:
    assert assert_native_equals_reference(data, SALES).num_rows == 0


def test_polars_stops_at_a_block_of_zero_records():
    data = with_empty_block_first(encode_rows(SALES, SEED_ROWS_CANONICAL))
    assert pl.read_avro(io.BytesIO(data)).height == 0  # the two records after it are lost
    assert len(reference(data, SALES)) == 2
    # ... so the module cuts such blocks out and stays native:
    assert assert_native_equals_reference(data, SALES).to_pylist() == SEED_ROWS_CANONICAL


def with_empty_block_first(data: bytes) -> bytes:
    header = _read_header(data)
    return data[:header.end] + b"\x00\x00" + header.sync + data[header.end:]


def test_empty_blocks_anywhere_are_cut_out():
    data = encode_rows(ALL_TYPES, ALL_TYPES_ROWS[:30], sync_interval=300)
    header = _read_header(data)
    spans = block_spans(data)
    empty = b"\x00\x00" + header.sync
    pieces = [data[:header.end], empty]
    for start, end in spans:
        pieces += [data[start:end], empty]
    assert_native_equals_reference(b"".join(pieces), ALL_TYPES)


def test_polars_nulls_an_out_of_range_time_micros_silently():
    schema = one_field_schema(["null", {"type": "long", "logicalType": "time-micros"}])
    data = plain_fastavro(schema, [{"x": 86_400_000_000, "sys_op": 0}])
    assert pl.read_avro(io.BytesIO(data))["x"].to_list() == [None]  # not an error
    # ... hence logical types are stripped before polars, and ranges checked here:
    assert_same_error(data, [Column("x", "time")])


@NEEDS_SNAPPY
def test_polars_checks_the_snappy_crc_and_fastavro_does_not():
    data = bytearray(encode_rows(SALES, SEED_ROWS_CANONICAL, codec="snappy"))
    _, end = block_spans(bytes(data))[0]
    data[end - 17] ^= 0xFF  # last byte of the block's CRC32, just before the sync marker
    with pytest.raises(pl.exceptions.ComputeError):
        pl.read_avro(io.BytesIO(bytes(data)))
    table, fallbacks = decode(bytes(data), SALES)  # fastavro's verdict stands: the rows
    assert fallbacks and fallbacks[0].startswith("polars failed")
    assert table.to_pylist() == SEED_ROWS_CANONICAL


# ---- many chunks


def test_many_chunks_concatenate_in_order_across_schemas_and_codecs():
    ddl = SALES + (Column("discount", "double"),)
    old = plain_fastavro(SEED_ROW_SCHEMA, SEED_ROW_RECORDS)  # before "discount" was added
    rows = [dict(r, id=r["id"] + 10, discount=0.5) for r in SEED_ROWS_CANONICAL]
    chunks = [
        old,
        encode_rows(ddl, rows, codec="deflate"),
        encode_rows(ddl, [], logical_types=False),
        encode_rows_any_codec(ddl, rows, "xz"),
        encode_rows(ddl, rows, logical_types=False),
    ]
    fallbacks: list[str] = []
    table = rows_to_arrow_many(iter(chunks), ddl, on_fallback=fallbacks.append)
    assert table.schema == arrow_schema(ddl)
    assert table.to_pylist() == [row for c in chunks for row in reference(c, ddl)]
    assert table.num_rows == 8
    assert fallbacks == ["codec 'xz' is not decoded by polars"]


def test_many_with_no_chunks_is_an_empty_table():
    table = rows_to_arrow_many([], SALES)
    assert table.num_rows == 0 and table.schema == arrow_schema(SALES)


def test_many_names_the_bad_chunk():
    good = encode_rows(SALES, SEED_ROWS_CANONICAL)
    with pytest.raises(BadContainerFileError, match=r"^bad_container_file: chunk 2: ") as info:
        rows_to_arrow_many([good, good, good[:-5], good], SALES)
    assert info.value.reason.startswith("chunk 2: truncated or corrupt")
