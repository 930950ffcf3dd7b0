"""Issue 31 for the change streams: every number a Qlik, DataWorks or Datastream message carries
is held to `resources.codecs.limits` by the codec, as a typed DecodeError of the codec (which the
sealer quarantines with its coordinates), never a crash of the tick, an unbounded conversion, or
an event time the ledger's 64-bit columns cannot store.

Before: the cases marked CRASH raised ValueError, OverflowError or RecursionError out of the codec
(the sealer catches DecodeError only: the tick failed, and every tick after it at the same
message); HANG took days (int() of the Decimal that JSON's 1e99999999 parses to); STORE decoded,
then the ledger's INSERT raised OverflowError on an event time beyond 64 bits; LAND decoded, then
failed its delta in the lake (an integer beyond 64 bits in a column of floats or bigints); STALL
decoded, and its sequenceId far above the real ones made every later message look re-sent after
a failover: the sealer stayed inside a transaction and cut no delta again.
"""

from __future__ import annotations

import json

import pytest

from resources.codecs.datastream import DatastreamBadEnvelopeError, decode_datastream
from resources.codecs.dataworks import (
    DataWorksBadEnvelopeError,
    DataWorksBadJsonError,
    DataWorksBadValueError,
    decode_dataworks,
)
from resources.codecs.limits import LONG_MAX, MAX_TIMESTAMP_US, MIN_TIMESTAMP_US
from resources.codecs.qlik import QlikBadEnvelopeError, QlikBadJsonError, QlikBadMetadataError, QlikDecoder
from resources.codecs.qlik_values import QlikBadValueError
from resources.errors import BadJsonError, DecodeError

DIGITS = "9" * 5000  # beyond Python's 4300-digit int conversion limit
DEEP = "[" * 100_000 + "]" * 100_000  # beyond the recursion limit


# --- DataWorks ------------------------------------------------------------------------------------

def dataworks(op="INSERT", *, event_time="1620457896000", seq='"1620457642589000000"', amount="15"):
    return (
        '{"schema": {"dataColumn": [{"name": "id", "type": "LONG"}, {"name": "amount", "type": "LONG"}], '
        '"primaryKey": ["id"], "source": {"dbType": "MySQL", "dbName": "shop", "tableName": "orders"}}, '
        f'"payload": {{"before": null, "after": {{"dataColumn": {{"id": 1, "amount": {amount}}}}}, '
        f'"sequenceId": {seq}, "timestamp": {{"eventTime": {event_time}}}, "op": "{op}", "ddl": null}}}}'
    ).encode()


@pytest.mark.parametrize("value, error, fragment", [
    (dataworks("MHEARTBEAT", event_time="100000000000000000"), DataWorksBadEnvelopeError,  # STORE
     "eventTime 100000000000000000 is outside -62135596800000..253402300799999"),
    (dataworks(event_time="-62135596800001"), DataWorksBadEnvelopeError, "eventTime -62135596800001 is outside"),
    (dataworks(event_time=DIGITS), DataWorksBadJsonError, "JSON that Python will not read: ValueError"),  # CRASH
    (DEEP.encode(), DataWorksBadJsonError, "RecursionError"),  # CRASH
    (dataworks(seq=f'"{DIGITS}"'), DataWorksBadEnvelopeError, "is beyond a long (5000 digits)"),  # CRASH
    (dataworks(seq='"100000000000000000000"'), DataWorksBadEnvelopeError, "is beyond a long (21 digits)"),  # STALL
    (dataworks(amount=f'"{DIGITS}"'), DataWorksBadValueError, "out of the signed 64-bit LONG range"),  # CRASH
    (dataworks(amount="9223372036854775808"), DataWorksBadValueError, "out of the signed 64-bit LONG range"),
], ids=["heartbeat-1e17", "before-year-1", "5000-digits", "deep", "sequence-5000-digits", "sequence-1e20",
        "long-text-5000-digits", "long-2^63"])
def test_dataworks_numbers(value, error, fragment):
    assert_refused(lambda: decode_dataworks(None, value), error, fragment)


def test_dataworks_numbers_at_the_limits_decode():
    assert decode_dataworks(None, dataworks("MHEARTBEAT", event_time=str(MAX_TIMESTAMP_US // 1000)))
    (change,) = decode_dataworks(None, dataworks(seq=f'"{LONG_MAX}"', amount=str(LONG_MAX)))
    assert change.values["amount"] == LONG_MAX and change.order_key[1] == LONG_MAX


# --- Datastream -----------------------------------------------------------------------------------

def datastream(source_timestamp: object = 1709283600000, *, sort_keys=(1709283600000, "mysql-bin.000123", 4567),
               read_timestamp: object = None, payload_amount: object = 1.5, **meta) -> bytes:
    metadata = {"log_file": "mysql-bin.000123", "log_position": 4567, "primary_keys": ["id"], "database": "shop",
                "table": "customers", "change_type": "INSERT", **meta}
    return json.dumps({"read_method": "mysql-cdc-binlog", "uuid": "u-1", "source_timestamp": source_timestamp,
                       "read_timestamp": read_timestamp, "sort_keys": list(sort_keys), "source_metadata": metadata,
                       "payload": {"id": 7, "amount": payload_amount}}).encode()


@pytest.mark.parametrize("value, error, fragment", [
    (datastream(10**17), DatastreamBadEnvelopeError, "source_timestamp 100000000000000000 is outside"),  # STORE
    (datastream(DIGITS), DatastreamBadEnvelopeError, "source_timestamp has 5000 digits"),  # CRASH
    (datastream(log_position="\u00b2"), DatastreamBadEnvelopeError, "log_position is '²', expected a long"),  # CRASH
    (datastream(log_position=DIGITS), DatastreamBadEnvelopeError, "log_position is '99999"),  # CRASH
    (datastream(log_position=2**63), DatastreamBadEnvelopeError, "expected a long"),
    (datastream(log_file="mysql-bin." + DIGITS), DatastreamBadEnvelopeError, "needs log_file"),  # CRASH
    (datastream(sort_keys=[2**64]), DatastreamBadEnvelopeError, "expected an array of strings and longs"),
    (datastream(read_timestamp=-(10**17)), DatastreamBadEnvelopeError, "read_timestamp -100000000000000000 is outside"),
    (datastream(payload_amount=2**64), DatastreamBadEnvelopeError,
     "payload column 'amount' holds an integer beyond 64 bits"),  # LAND: its delta failed in the lake
    (b'{"uuid": ' + DIGITS.encode() + b"}", BadJsonError, "JSON that Python will not read: ValueError"),  # CRASH
    (DEEP.encode(), BadJsonError, "RecursionError"),  # CRASH
], ids=["timestamp-1e17", "timestamp-5000-digits", "superscript-two", "position-5000-digits", "position-2^63",
        "log-file-5000-digits", "sort-key-2^64", "read-timestamp", "payload-2^64", "5000-digits", "deep"])
def test_datastream_numbers(value, error, fragment):
    assert_refused(lambda: decode_datastream(None, value), error, fragment)


def test_datastream_numbers_at_the_limits_decode():
    (change,) = decode_datastream(None, datastream(MIN_TIMESTAMP_US // 1000, log_position=str(LONG_MAX)))
    assert change.event_time_us == MIN_TIMESTAMP_US // 1000 * 1000 and change.order_key[2][2] == LONG_MAX


# --- Qlik -----------------------------------------------------------------------------------------

def qlik_metadata(version="1") -> bytes:
    return ('{"schemaId": "T-v1", "lineage": {"schema": "S", "table": "T", "tableVersion": ' + version + '}, '
            '"tableStructure": {"tableColumns": {"ID": {"ordinal": 1, "type": "INT4", "primaryKeyPosition": 1}, '
            '"RATIO": {"ordinal": 2, "type": "REAL8"}}}}').encode()


def qlik_data(id_value="1", ratio="0.5", *, sequence='"20240506100102000000000000000000001"', counter="1") -> bytes:
    return ('{"schema": "S", "table": "T", "headers": {"operation": "INSERT", "changeSequence": ' + sequence
            + ', "transactionEventCounter": ' + counter + ', "timestamp": "2024-05-06T10:01:02"}, '
            '"data": {"ID": ' + id_value + ', "RATIO": ' + ratio + "}}").encode()


@pytest.mark.parametrize("value, error, fragment", [
    (qlik_data(id_value="1e99999999"), QlikBadValueError, "1E+99999999 is outside"),  # HANG
    (qlik_data(id_value="Infinity"), QlikBadValueError, "inf is outside"),  # CRASH (OverflowError)
    (qlik_data(id_value="18446744073709551616"), QlikBadValueError, "18446744073709551616 is outside"),
    (qlik_data(ratio="1" + "0" * 400), QlikBadValueError, "column RATIO (REAL8)"),  # CRASH (OverflowError)
    (qlik_data(sequence='"' + DIGITS + '"'), QlikBadEnvelopeError, "changeSequence has 5000 digits"),
    (qlik_data(counter=str(2**64)), QlikBadEnvelopeError, "transactionEventCounter must be an integer of 64 bits"),
    (qlik_data(id_value=DIGITS), QlikBadJsonError, "Exceeds the limit (4300 digits)"),
    (DEEP.encode(), QlikBadJsonError, "maximum recursion depth"),  # CRASH
], ids=["int-1e99999999", "int-infinity", "int-2^64", "real-1e400", "sequence-5000-digits", "counter-2^64",
        "5000-digits", "deep"])
def test_qlik_numbers(value, error, fragment):
    decoder = QlikDecoder()
    decoder.decode(None, qlik_metadata())
    assert_refused(lambda: decoder.decode(None, value), error, fragment)
    assert decoder.decode(None, qlik_data())[0].values == {"ID": 1, "RATIO": 0.5}  # the good ones go on


def test_qlik_table_version_beyond_a_long_is_bad_metadata():
    assert_refused(lambda: QlikDecoder().decode(None, qlik_metadata(version=f'"{DIGITS}"')), QlikBadMetadataError,
                   "lineage.tableVersion must be an integer of 64 bits")


def assert_refused(call, error: type[DecodeError], fragment: str) -> None:
    with pytest.raises(DecodeError) as info:
        call()
    assert isinstance(info.value, error), repr(info.value)
    assert fragment in info.value.reason, info.value.reason
    assert info.value.part in ("value", None)
