"""Issue 31, the counts inside Avro values: a block's record count and an array's item count cost
what their bytes cost (resources/codecs/avro_counts.py), in every codec that reads Avro from Kafka.

Before: a backup row container claiming 10^12 records in one block was indexed as a good chunk
(`container_record_count` returned 10^12) and polars aborted the process landing it under a
memory cap ("memory allocation of 8000000000000 bytes failed"); a container of zero-field records claiming 10^12
yielded a record per claim (inspect reads every value through: days); an array of nulls claiming
N items built a list of N Nones in the Qlik and Datastream codecs and in a backup key with an
extra field (N = 10^12: all the memory there is; the tests claim 10^7 so that the old code fails
them quickly instead).
"""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
import zlib

import fastavro
import pytest

from resources.codecs.arrow_rows import _write_long, container_record_count
from resources.codecs.avro_counts import block_holds, zero_size_repeat
from resources.codecs.backup import KEY_SCHEMA, decode_backup_key, encode_rows, iter_rows, row_avro_schema
from resources.codecs.datastream import avro_event_schema, decode_datastream
from resources.codecs.qlik import ENVELOPE_SCHEMA, QlikBadAvroError, QlikDecoder
from resources.codecs.types import Column
from resources.errors import BadAvroKeyError, BadContainerFileError

SYNC = b"S" * 16
COLUMNS = [Column("id", "bigint")]
NULLS = {"type": "array", "items": "null"}  # each item takes zero bytes


def container(schema: dict, count: int, payload: bytes, codec: str = "null") -> bytes:
    """A container file of `schema` whose one block claims `count` records stored as `payload`."""
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), [], codec=codec, sync_marker=SYNC)  # the header alone
    return buf.getvalue() + _write_long(count) + _write_long(len(payload)) + payload + SYNC


# --- the rules ----------------------------------------------------------------------------------

@pytest.mark.parametrize("schema, where", [
    ({"type": "record", "name": "r", "fields": []}, "the records"),
    ({"type": "record", "name": "r", "fields": [{"name": "a", "type": "null"},
                                               {"name": "b", "type": {"type": "fixed", "name": "f", "size": 0}}]},
     "the records"),
    ({"type": "record", "name": "r", "fields": [{"name": "a", "type": NULLS}]}, "array .a"),
    ({"type": "record", "name": "r", "namespace": "n", "fields": [
        {"name": "e", "type": {"type": "record", "name": "empty", "fields": []}},
        {"name": "a", "type": {"type": "array", "items": "n.empty"}}]}, "array .a"),
    (row_avro_schema(COLUMNS), None),
    ({"type": "record", "name": "node", "fields": [{"name": "next", "type": ["null", "node"]}]}, None),
    ({"type": "record", "name": "r", "fields": [{"name": "m", "type": {"type": "map", "values": "null"}},
                                               {"name": "a", "type": {"type": "array", "items": ["null", "int"]}}]},
     None),
])
def test_zero_size_repeat(schema, where):
    assert zero_size_repeat(schema) == where


def test_a_block_holds_no_more_records_than_its_uncompressed_bytes():
    assert block_holds("null", b"x" * 10, 10) and not block_holds("null", b"x" * 10, 11)
    deflated = zlib.compressobj(9, zlib.DEFLATED, -15)
    stored = deflated.compress(b"\x00" * 3_000_000) + deflated.flush()  # ~3 KB holding 3 MB: counted in steps
    assert block_holds("deflate", stored, 3_000_000) and not block_holds("deflate", stored, 3_000_001)
    snappy = bytes([0xF4, 0x03]) + b"\x00" * 8  # a raw snappy stream: its uncompressed length (500), a varint
    assert block_holds("snappy", snappy, 500) and not block_holds("snappy", snappy, 501)


# --- every reader ---------------------------------------------------------------------------------

def test_a_row_block_claiming_more_records_than_bytes_is_a_bad_container():
    good = encode_rows(COLUMNS, [{"id": 1, "sys_op": 0}], sync_marker=SYNC)
    bomb = container(row_avro_schema(COLUMNS), 10**12, good[good.rfind(SYNC, 0, len(good) - 16) + 18:-16])
    with pytest.raises(BadContainerFileError, match="claims 1000000000000 records in 4 bytes"):
        container_record_count(bomb)  # the indexer's check: never indexed as a good chunk
    # The native decoder, in a process of its own with its address space capped at 4 GiB (as a
    # `ulimit -v`, or vm.overcommit_memory=2, would): before, polars aborted it (SIGABRT).
    # The cap is set by the child itself, not by a preexec_fn: a fork of this (threaded) process
    # runs the at-fork handlers of what it has loaded (gRPC's, after an integration test on the same
    # worker), which aborted the child (SIGABRT, "epoll_wait error: Bad file descriptor").
    cap = 4 << 30
    code = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))\n"
            "from resources.codecs.arrow_rows import rows_to_arrow; from resources.codecs.types import "
            "Column; from resources.errors import BadContainerFileError\n"
            "try: rows_to_arrow(sys.stdin.buffer.read(), [Column('id', 'bigint')])\n"
            "except BadContainerFileError as e: print(e.kind)")
    run = subprocess.run([sys.executable, "-c", code], input=bomb, capture_output=True, timeout=120)
    assert (run.returncode, run.stdout.strip()) == (0, b"bad_container_file"), run.stderr[-2000:]


def test_zero_byte_records_are_a_bad_container_before_any_is_read():
    bomb = container({"type": "record", "name": "row", "fields": []}, 10**12, b"")
    with pytest.raises(BadContainerFileError, match="lets the records take zero bytes"):
        next(iter(iter_rows(bomb)))  # inspect reads every value so


def test_qlik_arrays_of_nulls_are_refused_in_containers_and_envelopes():
    schema = {"type": "record", "name": "m", "fields": [{"name": "headers", "type": NULLS}]}
    bomb = container(schema, 1, _write_long(10**7) + _write_long(0))
    with pytest.raises(QlikBadAvroError, match="lets array .headers take zero bytes"):
        QlikDecoder().decode(None, bomb)
    body = _write_long(10**7) + _write_long(0)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(ENVELOPE_SCHEMA), {
        "magic": b"atMSG", "type": "DT", "headers": None, "messageSchemaId": None,
        "messageSchema": json.dumps(NULLS), "message": body})
    with pytest.raises(QlikBadAvroError, match="embedded messageSchema .*lets array \\(top\\) take zero bytes"):
        QlikDecoder().decode(None, buf.getvalue())


def test_datastream_arrays_of_nulls_are_refused():
    schema = avro_event_schema("mysql", [("id", "long"), ("tags", NULLS)])
    with pytest.raises(BadContainerFileError, match="lets array .payload.tags take zero bytes"):
        decode_datastream(None, container(schema, 1, b"\x00"))


def test_a_key_with_an_extra_array_of_nulls_is_a_bad_key():
    schema = copy.deepcopy(KEY_SCHEMA)
    schema["fields"].append({"name": "extra", "type": NULLS})
    record = {f["name"]: v for f, v in zip(KEY_SCHEMA["fields"], ("inc", 0, "dm", 1, 0, "t", 1, 1, 1, True))}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(KEY_SCHEMA), record)
    key = container(schema, 1, buf.getvalue() + _write_long(10**7) + _write_long(0))
    with pytest.raises(BadAvroKeyError, match="lets array .extra take zero bytes"):
        decode_backup_key(key)
