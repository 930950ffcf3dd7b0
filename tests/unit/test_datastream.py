"""Datastream codec and emulator: the seed's examples, MySQL and Oracle metadata, every operation,
Avro = JSON, every bad input's exact error, and a replay of the emulator against its truth.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import io
import itertools
import json

import fastavro
import pytest

from resources.codecs.cdc import DELETE, UPSERT, Change
from resources.codecs.datastream import (
    DatastreamBadEnvelopeError,
    DatastreamUnknownChangeTypeError,
    DatastreamUnknownReadMethodError,
    avro_event_schema,
    decode_datastream,
    encode_avro_events,
    encode_json_event,
    parse_datastream,
)
from resources.emulator.datastream import DatastreamConfig, build_datastream_story
from resources.errors import BadContainerFileError, BadJsonError, Location


def us(text: str) -> int:
    moment = dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)


def one(value: bytes) -> Change:
    (change,) = decode_datastream(None, value)
    return change


# --- Seed 004 test vectors ------------------------------------------------------------------------
# The three examples of "Exemple de flux d'événements", verbatim except for the document's typos,
# which make them invalid JSON; corrected here, and only here:
# - missing commas added after `"log_file": ""` and after `"table": "SAMPLE"`;
# - keys written with no value (`"tx_id":` in all three, `"log_file":` and `"database":` in UPDATE
#   and DELETE) given the value null;
# - trailing commas removed after `"ssn": ...` and after the payload's last column.
# Everything else is as the seed has it, including values that look like typos but are valid JSON
# (the DELETE's 15-digit scn 158691504732555, a different row_id in each event, change_type "UPDATE").

SEED_INSERT = """{
  "stream_name": "projects/myProj/locations/myLoc/streams/Oracle-to-Source",
  "read_method": "oracle-cdc-logminer",
  "object": "SAMPLE.TBL",
  "uuid": "d7989206-380f-0e81-8056-240501101100",
  "read_timestamp": "2019-11-07T07:37:16.808Z",
  "source_timestamp": "2019-11-07T02:15:39",
  "source_metadata": {
    "log_file": "",
    "scn": 15869116216871,
    "row_id": "AAAPwRAALAAMzMBABD",
    "is_deleted": false,
    "database": "DB1",
    "schema": "ROOT",
    "table": "SAMPLE",
    "change_type": "INSERT",
    "tx_id": null,
    "rs_id": "0x0073c9.000a4e4c.01d0",
    "ssn": 67
  },
  "payload": {
    "THIS_IS_MY_PK": "1231535353",
    "FIELD1": "foo",
    "FIELD2": "TLV"
  }
}"""

SEED_UPDATE = """{
  "stream_name": "projects/myProj/locations/myLoc/streams/Oracle-to-Source",
  "read_method": "oracle-cdc-logminer",
  "object": "SAMPLE.TBL",
  "uuid": "e6067366-1efc-0a10-a084-0d8701101101",
  "read_timestamp": "2019-11-07T07:37:18.808Z",
  "source_timestamp": "2019-11-07T02:17:39",
  "source_metadata": {
    "log_file": null,
    "scn": 15869150473224,
    "row_id": "AAAGYPAATAAPIC5AAB",
    "is_deleted": false,
    "database": null,
    "schema": "ROOT",
    "table": "SAMPLE",
    "change_type": "UPDATE",
    "tx_id": null,
    "rs_id": "0x006cf4.00056b26.0010",
    "ssn": 0
  },
  "payload": {
    "THIS_IS_MY_PK": "1231535353",
    "FIELD1": null,
    "FIELD2": "TLV"
  }
}"""

SEED_DELETE = """{
  "stream_name": "projects/myProj/locations/myLoc/streams/Oracle-to-Source",
  "read_method": "oracle-cdc-logminer",
  "object": "SAMPLE.TBL",
  "uuid": "c504f4bc-0ffc-4a1a-84df-6aba382fa651",
  "read_timestamp": "2019-11-07T07:37:20.808Z",
  "source_timestamp": "2019-11-07T02:19:39",
  "source_metadata": {
    "log_file": null,
    "scn": 158691504732555,
    "row_id": "AAAGYPAATAAPIC5AAC",
    "is_deleted": true,
    "database": null,
    "schema": "ROOT",
    "table": "SAMPLE",
    "change_type": "DELETE",
    "tx_id": null,
    "rs_id": "0x006cf4.00056b26.0011",
    "ssn": 0
  },
  "payload": {
    "THIS_IS_MY_PK": "1231535353",
    "FIELD1": null,
    "FIELD2": "TLV"
  }
}"""

# The INSERT example exactly as the seed prints it: not JSON, so not accepted.
SEED_INSERT_AS_PRINTED = """{
  "stream_name": "projects/myProj/locations/myLoc/streams/Oracle-to-Source",
  "read_method": "oracle-cdc-logminer",
  "object": "SAMPLE.TBL",
  "uuid": "d7989206-380f-0e81-8056-240501101100",
  "read_timestamp": "2019-11-07T07:37:16.808Z",
  "source_timestamp": "2019-11-07T02:15:39",
  "source_metadata": {
    "log_file": ""
    "scn": 15869116216871,
    "row_id": "AAAPwRAALAAMzMBABD",
    "is_deleted": false,
    "database": "DB1",
    "schema": "ROOT",
    "table": "SAMPLE"
    "change_type": "INSERT",
    "tx_id":
    "rs_id": "0x0073c9.000a4e4c.01d0",
    "ssn": 67,
  },
  "payload": {
    "THIS_IS_MY_PK": "1231535353",
    "FIELD1": "foo",
    "FIELD2": "TLV",
  }
}"""

SEED = [SEED_INSERT, SEED_UPDATE, SEED_DELETE]


def test_seed_insert_vector():
    assert one(SEED_INSERT.encode()) == Change(
        source="datastream", namespace="ROOT", table="SAMPLE", operation=UPSERT, key_columns=("ROWID",),
        values={"THIS_IS_MY_PK": "1231535353", "FIELD1": "foo", "FIELD2": "TLV", "ROWID": "AAAPwRAALAAMzMBABD"},
        order_key=(1, "oracle", (15869116216871, (0x0073C9, 0x000A4E4C, 0x01D0), 67), 1, (),
                   "d7989206-380f-0e81-8056-240501101100"),
        captured=None, column_types={}, transaction_id=None, last_in_transaction=None,
        event_time_us=us("2019-11-07T02:15:39"), event_id="d7989206-380f-0e81-8056-240501101100",
        is_backfill=False, source_op="INSERT",
    )


def test_seed_update_vector_change_type_update_is_an_upsert_of_the_whole_new_row():
    change = one(SEED_UPDATE.encode())
    assert change.operation == UPSERT and change.source_op == "UPDATE"
    assert change.values == {"THIS_IS_MY_PK": "1231535353", "FIELD1": None, "FIELD2": "TLV", "ROWID": "AAAGYPAATAAPIC5AAB"}
    assert change.namespace == "ROOT"  # the schema; database is null here
    assert change.event_time_us == us("2019-11-07T02:17:39")


def test_seed_delete_vector_carries_the_whole_deleted_row():
    change = one(SEED_DELETE.encode())
    assert change.operation == DELETE and change.source_op == "DELETE"
    assert change.values == {"THIS_IS_MY_PK": "1231535353", "FIELD1": None, "FIELD2": "TLV", "ROWID": "AAAGYPAATAAPIC5AAC"}
    assert change.key_columns == ("ROWID",) and change.event_id == "c504f4bc-0ffc-4a1a-84df-6aba382fa651"


def test_seed_metadata_is_parsed_field_by_field():
    (event,) = parse_datastream(SEED_INSERT.encode())
    assert (event.stream_name, event.read_method, event.database_type, event.family, event.object) == (
        "projects/myProj/locations/myLoc/streams/Oracle-to-Source", "oracle-cdc-logminer", "oracle", "cdc", "SAMPLE.TBL")
    assert event.read_timestamp_us == us("2019-11-07T07:37:16.808")
    assert event.source_timestamp_us == us("2019-11-07T02:15:39")
    assert event.schema_key is None and event.sort_keys is None  # absent from the seed's examples
    m = event.source_metadata
    assert (m.log_file, m.scn, m.row_id, m.is_deleted, m.database, m.schema, m.table, m.change_type, m.tx_id,
            m.rs_id, m.ssn) == ("", 15869116216871, "AAAPwRAALAAMzMBABD", False, "DB1", "ROOT", "SAMPLE", "INSERT",
                                None, "0x0073c9.000a4e4c.01d0", 67)
    assert m.log_position is None and m.primary_keys is None


def test_seed_events_are_in_story_order_by_scn_though_not_by_rs_id_alone():
    t0, t1, t2 = (one(s.encode()) for s in SEED)
    assert t0.order_key < t1.order_key < t2.order_key
    # The seed's illustrative rs_ids alone would put T1 and T2 before T0: why the scn leads the key.
    rs = [c.order_key[2][1] for c in (t0, t1, t2)]
    assert sorted(rs) == [rs[1], rs[2], rs[0]]


def test_seed_example_as_printed_is_rejected_as_bad_json():
    with pytest.raises(BadJsonError) as info:
        decode_datastream(None, SEED_INSERT_AS_PRINTED.encode())
    assert type(info.value) is BadJsonError and "line 10" in str(info.value)


# --- MySQL ---------------------------------------------------------------------------------------


def mysql_event(change_type="INSERT", *, uuid="u-1", log_file="mysql-bin.000123", log_position=4567,
                read_method="mysql-cdc-binlog", is_deleted=False, source_timestamp="2024-03-01T09:00:00.000Z",
                payload=None, **meta) -> dict:
    return {
        "stream_name": "projects/p/locations/l/streams/shop", "read_method": read_method, "object": "shop.customers",
        "schema_key": "k1", "uuid": uuid, "read_timestamp": "2024-03-01T09:00:01.000Z",
        "source_timestamp": source_timestamp,
        "sort_keys": [k for k in (1709283600000, log_file, log_position) if k is not None],
        "source_metadata": {"log_file": log_file, "log_position": log_position, "primary_keys": ["id"],
                            "is_deleted": is_deleted, "database": "shop", "table": "customers",
                            "change_type": change_type, **meta},
        "payload": payload if payload is not None else {"id": 7, "name": "Ada", "email": None, "tier": "gold"},
    }


def enc(event: dict) -> bytes:
    return json.dumps(event).encode()


def test_mysql_metadata_is_parsed():
    (event,) = parse_datastream(enc(mysql_event()))
    m = event.source_metadata
    assert (m.log_file, m.log_position, m.primary_keys, m.is_deleted, m.database, m.table, m.change_type) == (
        "mysql-bin.000123", 4567, ("id",), False, "shop", "customers", "INSERT")
    assert event.sort_keys == (1709283600000, "mysql-bin.000123", 4567) and event.schema_key == "k1"
    change = one(enc(mysql_event()))
    assert (change.namespace, change.table, change.key_columns, change.transaction_id) == ("shop", "customers", ("id",), None)
    assert change.order_key[:4] == (1, "mysql", (123, "mysql-bin.000123", 4567), 1)


@pytest.mark.parametrize("change_type, operation", [
    ("INSERT", UPSERT), ("UPDATE-INSERT", UPSERT), ("UPDATE", UPSERT), ("UPDATE-DELETE", DELETE), ("DELETE", DELETE),
])
def test_each_change_type(change_type, operation):
    change = one(enc(mysql_event(change_type)))
    assert change.operation == operation and change.source_op == change_type
    assert change.values == {"id": 7, "name": "Ada", "email": None, "tier": "gold"}  # always the whole row


@pytest.mark.parametrize("change_type", ["INSERT", "UPDATE-INSERT"])
def test_is_deleted_true_makes_a_delete(change_type):
    change = one(enc(mysql_event(change_type, is_deleted=True)))
    assert change.operation == DELETE and change.source_op == change_type


def test_composite_and_missing_primary_keys():
    row = {"region": "eu", "order_id": 5, "amount": 1.5}
    assert one(enc(mysql_event(payload=row, primary_keys=["region", "order_id"]))).key_columns == ("region", "order_id")
    assert one(enc(mysql_event(primary_keys=[]))).key_columns == ()  # no primary key: nothing invented


def test_binlog_files_compare_by_their_number_then_position():
    keys = [one(enc(mysql_event(log_file=f, log_position=p, uuid=f"{f}{p}"))).order_key
            for f, p in [("mysql-bin.999999", 9000), ("mysql-bin.1000000", 4), ("mysql-bin.1000000", 120)]]
    assert keys == sorted(keys)
    assert "mysql-bin.999999" > "mysql-bin.1000000"  # why text order would be wrong


def test_key_change_old_image_is_deleted_before_the_new_one_at_one_position():
    old = one(enc(mysql_event("UPDATE-DELETE", uuid="z-old", is_deleted=True)))
    new = one(enc(mysql_event("UPDATE-INSERT", uuid="a-new", payload={"id": 107, "name": "Ada", "email": None,
                                                                      "tier": "gold"})))
    assert old.order_key < new.order_key  # same log position: the rank, not the uuid, decides
    state = apply_by_order_key([new, old])
    assert state == {"shop.customers": {(107,): new.values}}


def test_same_key_update_as_delete_then_insert_keeps_the_row():
    old = one(enc(mysql_event("UPDATE-DELETE", uuid="b")))
    new = one(enc(mysql_event("UPDATE-INSERT", uuid="a", payload={"id": 7, "name": "Bo", "email": None, "tier": "x"})))
    assert apply_by_order_key([new, old]) == {"shop.customers": {(7,): new.values}}


@pytest.mark.parametrize("stamp", ["2024-03-01T09:00:00.250Z", "2024-03-01T09:00:00.250", "2024-03-01T09:00:00.250+00:00",
                                   "2024-03-01T10:00:00.250+01:00", 1709283600250, "1709283600250"])
def test_timestamp_forms(stamp):
    assert one(enc(mysql_event(source_timestamp=stamp))).event_time_us == us("2024-03-01T09:00:00.250")


# --- backfill and its rule ------------------------------------------------------------------------


@pytest.mark.parametrize("read_method", ["mysql-backfill-fulldump", "mysql-backfill-incremental"])
def test_backfill_events_are_flagged_and_sort_before_every_cdc_event(read_method):
    read = one(enc(mysql_event(read_method=read_method, log_file=None, log_position=None, uuid="r",
                               source_timestamp="2030-01-01T00:00:00Z")))
    cdc = one(enc(mysql_event(uuid="c", log_file="mysql-bin.000001", log_position=4)))
    assert read.is_backfill and not cdc.is_backfill
    assert read.order_key < cdc.order_key  # although read later than the change
    assert read.order_key[:3] == (0, "mysql", (us("2030-01-01T00:00:00"),))


def test_backfill_reads_order_among_themselves_by_source_time():
    early, late = (one(enc(mysql_event(read_method="mysql-backfill-fulldump", uuid=u, source_timestamp=t,
                                       log_file=None, log_position=None)))
                   for u, t in [("z", "2024-03-01T09:00:00Z"), ("a", "2024-03-01T09:00:01Z")])
    assert early.order_key < late.order_key


def test_backfill_may_omit_change_type_and_log_position():
    event = mysql_event(read_method="mysql-backfill-fulldump", log_file=None, log_position=None)
    del event["source_metadata"]["change_type"]
    change = one(enc(event))
    assert change.operation == UPSERT and change.source_op is None and change.is_backfill


def test_oracle_supplementation_is_a_read_like_backfill():
    event = json.loads(SEED_INSERT)
    event["read_method"] = "oracle-supplementation"
    change = one(enc(event))
    assert change.is_backfill and change.order_key[0] == 0


def test_duplicate_is_recognised_by_uuid_and_has_the_same_order_key():
    first = mysql_event(uuid="same")
    again = {**first, "read_timestamp": "2024-03-01T09:05:00.000Z"}  # re-read minutes later
    a, b = one(enc(first)), one(enc(again))
    assert a.event_id == b.event_id == "same" and a.order_key == b.order_key


def test_backfill_rule_converges_whatever_the_arrival_order():
    """A stale read, an update, a late read after it, the row's delete and a duplicate: every
    arrival order merged incrementally (greatest order key per key wins, deletes kept as
    tombstones) ends with the row deleted; and a read of an untouched row survives."""
    stale = mysql_event(read_method="mysql-backfill-fulldump", log_file=None, log_position=None, uuid="r1",
                        source_timestamp="2024-03-01T09:00:00Z")
    update = mysql_event("UPDATE-INSERT", uuid="c1", log_position=100, payload={"id": 7, "name": "Bo", "email": None,
                                                                                 "tier": "x"})
    fresh = {**stale, "uuid": "r2", "source_timestamp": "2024-03-01T09:00:05Z", "payload": update["payload"]}
    delete = mysql_event("DELETE", uuid="c2", log_position=200, is_deleted=True, payload=update["payload"])
    other = {**stale, "uuid": "r3", "payload": {"id": 8, "name": "Cy", "email": None, "tier": "basic"}}
    changes = [one(enc(e)) for e in (stale, update, fresh, delete, update, other)]
    for order in itertools.permutations(changes):
        merged: dict = {}
        for c in order:
            key = tuple(c.values[k] for k in c.key_columns)
            if key not in merged or c.order_key > merged[key][0]:
                merged[key] = (c.order_key, c.values if c.operation == UPSERT else None)
        assert {k: v for k, (_, v) in merged.items() if v is not None} == {(8,): other["payload"]}


# --- Oracle --------------------------------------------------------------------------------------


def oracle_event(**meta) -> dict:
    event = json.loads(SEED_INSERT)
    event["source_metadata"].update(meta)
    return event


def test_oracle_rowid_spelling_and_primary_keys():
    event = oracle_event(rowid="AAAX")
    del event["source_metadata"]["row_id"]
    assert one(enc(event)).values["ROWID"] == "AAAX"
    keyed = one(enc(oracle_event(primary_keys=["THIS_IS_MY_PK"])))
    assert keyed.key_columns == ("THIS_IS_MY_PK",) and "ROWID" not in keyed.values


def test_oracle_without_rowid_or_keys_has_no_key_columns():
    event = oracle_event(row_id=None)
    assert one(enc(event)).key_columns == ()


def test_oracle_transaction_id_and_update_insert():
    change = one(enc(oracle_event(tx_id="10.5.4021", change_type="UPDATE-INSERT")))
    assert change.transaction_id == "10.5.4021" and change.operation == UPSERT


def test_oracle_order_is_scn_then_rs_id_then_ssn():
    def key(scn, rs_id, ssn, uuid):
        event = oracle_event(scn=scn, rs_id=rs_id, ssn=ssn)
        event["uuid"] = uuid
        return one(enc(event)).order_key

    ordered = [key(10, "0x000002.00000001.0010", 0, "d"), key(11, " 0x000001.00000009.0010 ", 0, "c"),
               key(11, "0x000001.0000000a.0010", 0, "b"), key(11, "0x000001.0000000a.0010", 1, "a")]
    assert ordered == sorted(ordered)
    assert ordered[1][2][1] == (1, 9, 16)  # LogMiner's padding spaces are stripped


# --- other sources: sort_keys ----------------------------------------------------------------------


def test_other_sources_order_by_sort_keys():
    def key(sort_keys, uuid, read_method="postgres-cdc-wal"):
        event = mysql_event(read_method=read_method, uuid=uuid)
        event["sort_keys"] = sort_keys
        return one(enc(event)).order_key

    ordered = [key([1, "0/16B3748"], "z"), key([1, "0/16B3750"], "y"), key([2, "0/0"], "x")]
    assert ordered == sorted(ordered) and ordered[0][:2] == (1, "postgres")
    assert key([5, "a"], "u", read_method="cdc")[:3] == (1, "", ((0, 5), (1, "a")))  # bare "cdc"


# --- Avro ----------------------------------------------------------------------------------------

SEED_COLUMNS = [("THIS_IS_MY_PK", "string"), ("FIELD1", ["null", "string"]), ("FIELD2", "string")]


def without_types(changes):
    return [Change(**{**c.__dict__, "column_types": {}}) for c in changes]


def test_avro_container_of_the_seed_vectors_gives_the_json_records():
    events = [json.loads(s) for s in SEED]
    data = encode_avro_events(avro_event_schema("oracle", SEED_COLUMNS), events, codec="deflate")
    from_avro = decode_datastream(None, data)
    from_json = [one(s.encode()) for s in SEED]
    assert without_types(from_avro) == from_json
    assert from_avro[0].column_types == {"THIS_IS_MY_PK": "string", "FIELD1": "string", "FIELD2": "string"}


def test_avro_types_are_kept_and_datetimes_become_naive_utc():
    columns = [("id", "long"), ("name", "string"), ("email", ["null", "string"]), ("tier", "string"),
               ("seen", {"type": "long", "logicalType": "timestamp-micros"}),
               ("price", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2})]
    event = mysql_event(payload={"id": 7, "name": "Ada", "email": None, "tier": "gold",
                                 "seen": dt.datetime(2024, 3, 1, 9, 0, 0, 123456, tzinfo=dt.timezone.utc),
                                 "price": decimal.Decimal("12.50")})
    change = one(encode_avro_events(avro_event_schema("mysql", columns), [event]))
    assert change.values["seen"] == dt.datetime(2024, 3, 1, 9, 0, 0, 123456) and change.values["id"] == 7
    assert change.column_types == {"id": "long", "name": "string", "email": "string", "tier": "string",
                                   "seen": "timestamp-micros", "price": "decimal(10,2)"}
    assert change.event_time_us == us("2024-03-01T09:00:00")


def test_json_encoder_round_trip():
    event = mysql_event(source_timestamp=1709283600250)
    change = one(encode_json_event(event))
    assert change.event_time_us == us("2024-03-01T09:00:00.250")
    assert json.loads(encode_json_event(event))["source_timestamp"] == "2024-03-01T09:00:00.250Z"


def test_avro_container_of_many_events_gives_one_change_each():
    events = [mysql_event(uuid=f"u{i}", log_position=100 + i) for i in range(5)]
    columns = [("id", "long"), ("name", "string"), ("email", ["null", "string"]), ("tier", "string")]
    changes = decode_datastream(None, encode_avro_events(avro_event_schema("mysql", columns), events))
    assert [c.event_id for c in changes] == [f"u{i}" for i in range(5)]


def test_broken_avro_containers():
    columns = [("id", "long"), ("name", "string"), ("email", ["null", "string"]), ("tier", "string")]
    data = encode_avro_events(avro_event_schema("mysql", columns), [mysql_event(uuid=f"u{i}") for i in range(50)])
    for broken in (data[:40], data[: len(data) - 30]):
        with pytest.raises(BadContainerFileError) as info:
            decode_datastream(None, broken)
        assert type(info.value) is BadContainerFileError and info.value.part == "value"


def test_avro_container_that_is_not_a_datastream_event():
    def container(schema, records):
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(schema), records)
        return buf.getvalue()

    plain = container({"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}, [{"a": 1}])
    with pytest.raises(DatastreamBadEnvelopeError, match="no field read_method, uuid"):
        decode_datastream(None, plain)
    schema = avro_event_schema("mysql", [("id", "long")])
    schema["fields"][-1] = {"name": "payload", "type": {"type": "map", "values": "long"}}
    with pytest.raises(DatastreamBadEnvelopeError, match="payload field is map<long>"):
        decode_datastream(None, container(schema, []))


# --- bad input: exact errors ---------------------------------------------------------------------


def mutated(path: str, value) -> bytes:
    """mysql_event() with the field at `path` ("a.b") set to `value` (or deleted if value is DEL)."""
    event = mysql_event()
    *parents, last = path.split(".")
    target = event
    for p in parents:
        target = target[p]
    if value is DEL:
        del target[last]
    else:
        target[last] = value
    return enc(event)


DEL = object()

BAD = [
    ("seed-as-printed", SEED_INSERT_AS_PRINTED.encode(), BadJsonError, "Expecting ',' delimiter"),
    ("not-utf8", b"\xff\xfe{}", BadJsonError, "not UTF-8"),
    ("truncated-json", enc(mysql_event())[:-5], BadJsonError, "not JSON"),
    ("empty", b"", DatastreamBadEnvelopeError, "empty"),
    ("blank", b"  \n", DatastreamBadEnvelopeError, "empty"),
    ("none", None, DatastreamBadEnvelopeError, "NoneType, expected bytes"),
    ("array", b"[1, 2]", DatastreamBadEnvelopeError, "got list"),
    ("no-uuid", mutated("uuid", DEL), DatastreamBadEnvelopeError, "uuid is missing"),
    ("uuid-number", mutated("uuid", 5), DatastreamBadEnvelopeError, "uuid is int"),
    ("no-read-method", mutated("read_method", DEL), DatastreamBadEnvelopeError, "read_method is missing"),
    ("read-method-unknown", mutated("read_method", "mysql-snapshot"), DatastreamUnknownReadMethodError, "mysql-snapshot"),
    ("read-method-two-families", mutated("read_method", "mysql-cdc-backfill"), DatastreamUnknownReadMethodError, "family"),
    ("change-type-unknown", mutated("source_metadata.change_type", "UPSERT"), DatastreamUnknownChangeTypeError, "'UPSERT'"),
    ("change-type-lowercase", mutated("source_metadata.change_type", "insert"), DatastreamUnknownChangeTypeError, "'insert'"),
    ("cdc-without-change-type", mutated("source_metadata.change_type", DEL), DatastreamBadEnvelopeError, "change_type is missing"),
    ("no-payload", mutated("payload", DEL), DatastreamBadEnvelopeError, "payload is NoneType"),
    ("payload-list", mutated("payload", [7, "Ada"]), DatastreamBadEnvelopeError, "payload is list"),
    ("no-source-metadata", mutated("source_metadata", DEL), DatastreamBadEnvelopeError, "source_metadata is NoneType"),
    ("no-table", mutated("source_metadata.table", DEL), DatastreamBadEnvelopeError, "table is missing"),
    ("no-source-timestamp", mutated("source_timestamp", DEL), DatastreamBadEnvelopeError, "source_timestamp is missing"),
    ("bad-source-timestamp", mutated("source_timestamp", "yesterday"), DatastreamBadEnvelopeError, "'yesterday'"),
    ("bad-read-timestamp", mutated("read_timestamp", True), DatastreamBadEnvelopeError, "read_timestamp is bool"),
    ("is-deleted-text", mutated("source_metadata.is_deleted", "yes"), DatastreamBadEnvelopeError, "is_deleted"),
    ("log-position-text", mutated("source_metadata.log_position", "abc"), DatastreamBadEnvelopeError, "log_position"),
    ("cdc-without-log-position", mutated("source_metadata.log_position", None), DatastreamBadEnvelopeError, "log_position"),
    ("log-file-without-number", mutated("source_metadata.log_file", "mysql-bin"), DatastreamBadEnvelopeError, "sequence number"),
    ("primary-keys-text", mutated("source_metadata.primary_keys", "id"), DatastreamBadEnvelopeError, "primary_keys"),
    ("primary-key-not-in-payload", mutated("source_metadata.primary_keys", ["id", "tenant"]), DatastreamBadEnvelopeError, "tenant"),
    ("sort-keys-bool", mutated("sort_keys", [True]), DatastreamBadEnvelopeError, "sort_keys"),
    ("generic-without-sort-keys", enc({**mysql_event(read_method="postgres-cdc-wal"), "sort_keys": None}),
     DatastreamBadEnvelopeError, "needs sort_keys"),
    ("oracle-without-scn", enc(oracle_event(scn=None)), DatastreamBadEnvelopeError, "needs scn"),
    ("oracle-bad-rs-id", enc(oracle_event(rs_id="0x00zz.01")), DatastreamBadEnvelopeError, "rs_id"),
    ("oracle-rowids-differ", enc(oracle_event(rowid="OTHER")), DatastreamBadEnvelopeError, "differ"),
    ("oracle-payload-rowid-differs", enc({**oracle_event(), "payload": {"ROWID": "X"}}), DatastreamBadEnvelopeError,
     "not the event's rowid"),
    ("not-avro-after-magic", b"Obj\x01garbage", BadContainerFileError, "unreadable Avro container header"),
]


@pytest.mark.parametrize("value, error, fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_raises_its_exact_typed_error(value, error, fragment):
    with pytest.raises(error) as info:
        decode_datastream(b"any key", value)
    exc = info.value
    assert type(exc) is error and exc.location is None and exc.part == "value"
    assert fragment in exc.reason
    located = exc.located(Location(topic="ds", partition=0, offset=9))
    assert str(located).startswith(f"{error.kind} (value) at topic 'ds' partition 0 offset 9: ")


def test_error_kinds_are_stable():
    assert (DatastreamBadEnvelopeError.kind, DatastreamUnknownChangeTypeError.kind,
            DatastreamUnknownReadMethodError.kind) == ("datastream_bad_envelope", "datastream_unknown_change_type",
                                                       "datastream_unknown_read_method")


# --- the emulator, replayed ------------------------------------------------------------------------


def apply_by_order_key(changes) -> dict:
    """The reference merge: per table, changes in order_key order, the last one per key wins."""
    per_table = collections.defaultdict(list)
    for c in changes:
        per_table[f"{c.namespace}.{c.table}"].append(c)
    state: dict = {}
    for table, items in per_table.items():
        rows = state.setdefault(table, {})
        for c in sorted(items, key=lambda c: c.order_key):
            key = tuple(c.values[k] for k in c.key_columns)
            if c.operation == UPSERT:
                rows[key] = c.values
            else:
                rows.pop(key, None)
    return {t: rows for t, rows in state.items() if rows}


def replay(messages, bound_us: int | None = None) -> dict:
    """Decode, drop duplicates by uuid (first copy wins), keep event times <= bound, merge."""
    seen, kept = set(), []
    for m in messages:
        for c in decode_datastream(m.key, m.value):
            if c.event_id not in seen:
                seen.add(c.event_id)
                kept.append(c)
    return apply_by_order_key(c for c in kept if bound_us is None or c.event_time_us <= bound_us)


def nonempty(state: dict) -> dict:
    return {t: rows for t, rows in state.items() if rows}


STORY = build_datastream_story(DatastreamConfig(seed=11))


def test_same_seed_same_story():
    again = build_datastream_story(DatastreamConfig(seed=11))
    assert again.messages == STORY.messages and again.changes == STORY.changes and again.initial == STORY.initial
    assert build_datastream_story(DatastreamConfig(seed=12)).messages != STORY.messages


def test_the_story_has_every_feature():
    decoded = [(i, c) for i, m in enumerate(STORY.messages) for c in decode_datastream(m.key, m.value)]
    assert all(m.role == "datastream" for m in STORY.messages)
    kinds = collections.Counter((c.order_key[1], c.is_backfill, c.source_op) for _, c in decoded)
    for kind in [("mysql", True, "INSERT"), ("oracle", True, "INSERT"), ("mysql", False, "INSERT"),
                 ("mysql", False, "UPDATE-INSERT"), ("mysql", False, "UPDATE-DELETE"), ("mysql", False, "DELETE"),
                 ("oracle", False, "INSERT"), ("oracle", False, "UPDATE"), ("oracle", False, "DELETE")]:
        assert kinds[kind] > 0, kind
    tables = {f"{c.namespace}.{c.table}" for _, c in decoded}
    assert tables == {"shop.customers", "shop.orders", "SALES.INVOICES"}
    # backfill interleaved with CDC in delivery order
    first_cdc = min(i for i, c in decoded if not c.is_backfill)
    assert any(c.is_backfill and i > first_cdc for i, c in decoded)
    # key changes: UPDATE-DELETE and UPDATE-INSERT share one log position
    positions = collections.defaultdict(set)
    for _, c in decoded:
        if c.source_op in ("UPDATE-DELETE", "UPDATE-INSERT"):
            positions[c.order_key[2]].add(c.source_op)
    assert any(ops == {"UPDATE-DELETE", "UPDATE-INSERT"} for ops in positions.values())
    assert STORY.injected["key_change"] and STORY.injected["pk_change"]
    # rollbacks: the INSERT and its inverse DELETE, one tx_id, the same rowid
    for tx, rowid in STORY.injected["rollback"]:
        ops = sorted((c.order_key, c.source_op) for _, c in decoded if c.transaction_id == tx and not c.is_backfill)
        assert [op for _, op in ops] == ["INSERT", "DELETE"]
    # binlog files past six digits
    files = {c.order_key[2][1] for _, c in decoded if c.order_key[:2] == (1, "mysql")}
    assert "mysql-bin.999999" in files and "mysql-bin.1000000" in files


def test_duplicates_and_lateness():
    seen_time, first_seen, late_dup, out_of_order = 0, {}, 0, 0
    for m in STORY.messages:
        (c,) = decode_datastream(m.key, m.value)
        if c.event_id in first_seen:  # a duplicate: re-read (other bytes), same change, minutes late
            original, original_value = first_seen[c.event_id]
            assert c == original and m.value != original_value
            late_dup += seen_time - c.event_time_us >= 60_000_000
            continue
        first_seen[c.event_id] = (c, m.value)
        out_of_order += c.event_time_us < seen_time
        assert seen_time - c.event_time_us < STORY.max_lateness_us  # first deliveries: bounded lateness
        seen_time = max(seen_time, c.event_time_us)
    assert len(STORY.injected["duplicate"]) >= 3 and late_dup >= 1  # duplicates minutes later
    assert out_of_order > 10


def test_replay_gives_the_truth_at_several_event_time_bounds():
    lo, hi = STORY.backfill_end_us, STORY.last_event_time_us - STORY.max_lateness_us
    assert lo < hi
    for bound in [lo + (hi - lo) * k // 5 for k in range(6)]:
        assert replay(STORY.messages, bound) == nonempty(STORY.state_at(bound)), bound
    assert replay(STORY.messages) == nonempty(STORY.state_at(STORY.last_event_time_us))


def test_streaming_replay_at_the_watermark_gives_the_truth():
    """A consumer that has read a prefix of the messages and seen event time T knows every event
    up to T - max lateness: its state at that watermark is the truth there (once backfilled)."""
    checked = 0
    for end in range(20, len(STORY.messages) + 1, 20):
        prefix = STORY.messages[:end]
        seen = max(c.event_time_us for m in prefix for c in decode_datastream(m.key, m.value))
        watermark = seen - STORY.max_lateness_us
        if watermark < STORY.backfill_end_us:
            continue
        assert replay(prefix, watermark) == nonempty(STORY.state_at(watermark)), end
        checked += 1
    assert checked >= 5


def test_naive_replay_in_arrival_order_is_wrong():
    """Why the rules matter: applying messages as they arrive, duplicates included, misses the truth."""
    state: dict = {}
    for m in STORY.messages:
        for c in decode_datastream(m.key, m.value):
            rows = state.setdefault(f"{c.namespace}.{c.table}", {})
            key = tuple(c.values[k] for k in c.key_columns)
            if c.operation == DELETE:
                rows.pop(key, None)
            else:
                rows[key] = c.values
    assert nonempty(state) != nonempty(STORY.state_at(STORY.last_event_time_us))


def test_avro_story_gives_the_same_records_as_the_json_story():
    avro = build_datastream_story(DatastreamConfig(seed=11, fmt="avro", codec="deflate"))
    assert all(m.value[:4] == b"Obj\x01" for m in avro.messages)
    from_avro = [c for m in avro.messages for c in decode_datastream(m.key, m.value)]
    from_json = [c for m in STORY.messages for c in decode_datastream(m.key, m.value)]
    assert without_types(from_avro) == from_json
    assert from_avro[0].column_types and not from_json[0].column_types
    assert avro.changes == STORY.changes
    assert replay(avro.messages) == nonempty(avro.state_at(avro.last_event_time_us))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_other_seeds_and_partitions_replay_to_the_truth(seed):
    story = build_datastream_story(DatastreamConfig(seed=seed, partitions=3, duplicate_rate=0.2))
    assert {m.partition for m in story.messages} <= {0, 1, 2}
    assert replay(story.messages) == nonempty(story.state_at(story.last_event_time_us))
    mid = (story.backfill_end_us + story.last_event_time_us - story.max_lateness_us) // 2
    assert replay(story.messages, mid) == nonempty(story.state_at(mid))


@pytest.mark.parametrize("nested, what", [([7], "an array"), ({"v": 7}, "an object")])
def test_a_payload_column_holding_an_array_or_object_is_a_bad_envelope(nested, what):
    # Valid JSON, but no row the lake can hold: landed, it would fail its whole delta.
    with pytest.raises(DatastreamBadEnvelopeError, match=f"payload column 'tier' is {what}"):
        decode_datastream(None, enc(mysql_event(payload={"id": 7, "tier": nested})))
