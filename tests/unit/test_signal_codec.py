"""Signal topic codec: the seed's examples verbatim, round trips, and every bad input's error."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from resources.codecs.signal import (
    DeltaCancel,
    DeltaClose,
    DeltaOpen,
    EventCode,
    SchemaChanged,
    SignalEvent,
    SignalKey,
    UnknownEvent,
    WriteCancel,
    WriteOk,
    decode_signal,
    encode_signal,
    format_prostore_datetime,
    parse_prostore_datetime,
)
from resources.errors import BadJsonError, BadSignalValueError, Location, NotASignalKeyError

UTC = timezone.utc
MSK = timezone(timedelta(hours=3))

# --- Seed 000 test vectors, verbatim (line breaks as in the seed) --------------------------------

SEED_KEY_TEMPLATE = """{
"datamart": "<logical_db>",
"datetime": "<event_timestamp>",
"event": "<event_code>",
"eventLogId": "<event_UUID>"
}"""

SEED_KEY_DELTA_CLOSE = """{
"datamart": "marketing",
"datetime": "2024-02-28 08:02:40.463",
"event": "DELTA_CLOSE",
"eventLogId": "6b80c392-3198-492f-a631-6a684e521b79"
}"""

SEED_KEY_WRITE_OK = """{
"datamart": "marketing",
"datetime": "2024-02-28 09:15:43.532",
"event": "WRITE_OK",
"eventLogId": "8b8dfa17-6605-4874-8ebf-1b8b47c201f3"
}"""

SEED_KEY_WRITE_CANCEL = """{
"datamart": "marketing",
"datetime": "2024-02-28 09:51:11.148",
"event": "WRITE_CANCEL",
"eventLogId": "3d963cbc-8782-498e-923d-602d7ccf7c2d"
}"""

# The value table of the seed; the first row lacks a quote before changeDateTime (sic).
SEED_VALUE_TEMPLATES = {
    "DATAMART_SCHEMA_CHANGED": '{"datamart": "<logical_db>", "entityName": "<entity_name>", '
    '"entityDefinition": "<entity_definition>", changeDateTime": "<ddl_timestamp>"}',
    "DELTA_OPEN": '{"deltaNum": <delta_number>}',
    "DELTA_CLOSE": '{"deltaNum": <delta_number>, "deltaDate": "<delta_commit_timestamp>"}',
    "DELTA_CANCEL": '{"deltaNum": <delta_number>}',
    "WRITE_OK": '{"entity": "<entity_name>", "cn": <sys_cn>, "ts": <ts_unix_time>, '
    '"rowsAffected": <rows_affected_quantity>}',
    "WRITE_CANCEL": '{"entity": "<entity_name>", "cn": <sys_cn>}',
}

SEED_VALUE_SCHEMA_CHANGED = """{
"changeDateTime": "2024-04-24 15:25:47.002",
"datamart": "marketing"
}"""

SEED_VALUE_DELTA_CLOSE = """{
"deltaNum": 8,
"deltaDate": "2024-04-28 08:02:40"
}"""

FILL = {
    "<logical_db>": "marketing",
    "<entity_name>": "sales",
    "<entity_definition>": "TABLE.DEFAULT",
    "<ddl_timestamp>": "2024-04-24 15:25:47.002",
    "<delta_number>": "8",
    "<delta_commit_timestamp>": "2024-04-28 08:02:40",
    "<sys_cn>": "12",
    "<ts_unix_time>": "1709111743532000",
    "<rows_affected_quantity>": "3",
}


def key_for(event: str, datamart: str = "marketing") -> bytes:
    return (
        f'{{"datamart": "{datamart}", "datetime": "2024-02-28 08:02:40.463", '
        f'"event": "{event}", "eventLogId": "6b80c392-3198-492f-a631-6a684e521b79"}}'
    ).encode()


def fill(template: str) -> bytes:
    for placeholder, value in FILL.items():
        template = template.replace(placeholder, value)
    return template.encode()


def at(text: str) -> datetime:
    return parse_prostore_datetime(text)


# --- Datetimes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, micros",
    [
        ("2024-02-28 08:02:40.463", 463000),
        ("2024-04-24 15:25:47.002", 2000),
        ("2024-04-28 08:02:40", 0),
        ("2024-04-28 08:02:40.5", 500000),
        ("2024-04-28 08:02:40.05", 50000),
        ("2024-04-28 08:02:40.0001", 100),
        ("2024-04-28 08:02:40.123456", 123456),
        ("2024-04-28 08:02:40.1234567", 123456),  # truncated, not rounded
        ("2024-04-28 08:02:40.999999999", 999999),
    ],
)
def test_parse_fraction_of_any_length(text, micros):
    parsed = parse_prostore_datetime(text)
    assert parsed.microsecond == micros
    assert parsed.tzinfo is UTC
    whole_seconds = datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    assert parsed.replace(microsecond=0) == whole_seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2024-02-28",
        "2024-02-28T08:02:40",
        "2024-02-28 08:02:40.",
        "2024-02-28 08:02:40.1234567890",
        "2024-02-28 08:02:40Z",
        " 2024-02-28 08:02:40",
        "2024-13-01 00:00:00",
        "2024-02-30 00:00:00",
        "2024-02-28 24:00:00",
        "<event_timestamp>",
    ],
)
def test_parse_rejects(text):
    with pytest.raises(ValueError, match="not"):
        parse_prostore_datetime(text)


def test_parse_with_another_zone():
    parsed = parse_prostore_datetime("2024-02-28 08:02:40.463", MSK)
    assert parsed == datetime(2024, 2, 28, 5, 2, 40, 463000, tzinfo=UTC)
    assert format_prostore_datetime(parsed, MSK) == "2024-02-28 08:02:40.463"
    assert format_prostore_datetime(parsed) == "2024-02-28 05:02:40.463"


@pytest.mark.parametrize(
    "micros, text",
    [
        (0, "2024-02-28 08:02:40"),
        (463000, "2024-02-28 08:02:40.463"),
        (2000, "2024-02-28 08:02:40.002"),
        (500000, "2024-02-28 08:02:40.500"),
        (123456, "2024-02-28 08:02:40.123456"),
        (100, "2024-02-28 08:02:40.000100"),
    ],
)
def test_format(micros, text):
    assert format_prostore_datetime(datetime(2024, 2, 28, 8, 2, 40, micros, tzinfo=UTC)) == text
    assert format_prostore_datetime(datetime(2024, 2, 28, 8, 2, 40, micros)) == text  # naive


@pytest.mark.parametrize(
    "text",
    ["2024-02-28 08:02:40.463", "2024-02-28 09:15:43.532", "2024-02-28 09:51:11.148",
     "2024-04-24 15:25:47.002", "2024-04-28 08:02:40", "2024-04-28 08:02:40.123456"],
)
def test_seed_datetimes_round_trip_as_text(text):
    assert format_prostore_datetime(parse_prostore_datetime(text)) == text


# --- Seed examples ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, event, when, event_log_id",
    [
        (SEED_KEY_DELTA_CLOSE, "DELTA_CLOSE", "2024-02-28 08:02:40.463",
         "6b80c392-3198-492f-a631-6a684e521b79"),
        (SEED_KEY_WRITE_OK, "WRITE_OK", "2024-02-28 09:15:43.532",
         "8b8dfa17-6605-4874-8ebf-1b8b47c201f3"),
        (SEED_KEY_WRITE_CANCEL, "WRITE_CANCEL", "2024-02-28 09:51:11.148",
         "3d963cbc-8782-498e-923d-602d7ccf7c2d"),
    ],
)
def test_seed_keys(raw, event, when, event_log_id):
    value = fill(SEED_VALUE_TEMPLATES[event])
    decoded = decode_signal(raw.encode(), value)
    assert decoded.key == SignalKey("marketing", at(when), event, event_log_id)
    assert decoded.key.code is EventCode(event)
    assert decoded.event_log_id == event_log_id
    assert decoded.datamart == "marketing"


def test_seed_key_template_is_not_a_key():
    # Valid JSON, but "<event_timestamp>" is no datetime.
    with pytest.raises(NotASignalKeyError, match="'datetime'") as info:
        decode_signal(SEED_KEY_TEMPLATE.encode(), b"{}")
    assert info.value.part == "key"


def test_seed_value_delta_close():
    decoded = decode_signal(SEED_KEY_DELTA_CLOSE.encode(), SEED_VALUE_DELTA_CLOSE.encode())
    assert decoded.value == DeltaClose(8, datetime(2024, 4, 28, 8, 2, 40, tzinfo=UTC))
    assert decoded.delta_num == 8


def test_seed_value_schema_changed_with_only_datamart_and_time():
    decoded = decode_signal(key_for("DATAMART_SCHEMA_CHANGED"), SEED_VALUE_SCHEMA_CHANGED.encode())
    when = at("2024-04-24 15:25:47.002")
    assert decoded.value == SchemaChanged("marketing", change_date_time=when)
    assert decoded.delta_num is None


def test_seed_value_template_of_schema_changed_is_broken_json():
    raw = fill(SEED_VALUE_TEMPLATES["DATAMART_SCHEMA_CHANGED"])
    with pytest.raises(BadJsonError, match="not JSON") as info:
        decode_signal(key_for("DATAMART_SCHEMA_CHANGED"), raw)
    assert info.value.part == "value"
    assert info.value.location is None


@pytest.mark.parametrize(
    "event, expected",
    [
        ("DELTA_OPEN", DeltaOpen(8)),
        ("DELTA_CLOSE", DeltaClose(8, datetime(2024, 4, 28, 8, 2, 40, tzinfo=UTC))),
        ("DELTA_CANCEL", DeltaCancel(8)),
        ("WRITE_OK", WriteOk("sales", 12, 1709111743532000, 3)),
        ("WRITE_CANCEL", WriteCancel("sales", 12)),
    ],
)
def test_seed_value_templates_filled(event, expected):
    assert decode_signal(key_for(event), fill(SEED_VALUE_TEMPLATES[event])).value == expected


def test_seed_schema_changed_template_with_its_quote_restored():
    raw = SEED_VALUE_TEMPLATES["DATAMART_SCHEMA_CHANGED"].replace(", changeDate", ', "changeDate')
    decoded = decode_signal(key_for("DATAMART_SCHEMA_CHANGED"), fill(raw))
    assert decoded.value == SchemaChanged(
        "marketing", "sales", "TABLE.DEFAULT", at("2024-04-24 15:25:47.002")
    )


# --- Round trips --------------------------------------------------------------------------------

ALL_VALUES = [
    SchemaChanged("marketing", "sales", "TABLE.DEFAULT", at("2024-04-24 15:25:47.002")),
    SchemaChanged("marketing", change_date_time=at("2024-04-24 15:25:47.002")),
    SchemaChanged("marketing"),
    DeltaOpen(0),
    DeltaClose(8, at("2024-04-28 08:02:40")),
    DeltaClose(9, at("2024-04-28 08:02:40.123456")),
    DeltaCancel(9),
    WriteOk("sales", 12, 1709111743532000, 3),
    WriteOk("proxy_sales", None, None, 5),
    WriteOk("sales", 12, 1709111743532000, None),
    WriteCancel("sales", 13),
    WriteCancel("proxy_sales", None),
]
CODES = {
    SchemaChanged: "DATAMART_SCHEMA_CHANGED", DeltaOpen: "DELTA_OPEN", DeltaClose: "DELTA_CLOSE",
    DeltaCancel: "DELTA_CANCEL", WriteOk: "WRITE_OK", WriteCancel: "WRITE_CANCEL",
}


def event_of(value, datamart="marketing", when="2024-02-28 08:02:40.463") -> SignalEvent:
    code = value.code if isinstance(value, UnknownEvent) else CODES[type(value)]
    return SignalEvent(SignalKey(datamart, at(when), code, "6b80c392-3198-492f-a631"), value)


@pytest.mark.parametrize("value", ALL_VALUES, ids=lambda v: type(v).__name__)
def test_round_trip(value):
    event = event_of(value)
    assert decode_signal(*encode_signal(event)) == event


def test_all_six_codes_are_covered():
    assert {CODES[type(v)] for v in ALL_VALUES} == {c.value for c in EventCode}


def test_encoded_bytes_follow_the_seed_order():
    key, value = encode_signal(event_of(DeltaClose(8, at("2024-04-28 08:02:40"))))
    assert key == (
        b'{"datamart": "marketing", "datetime": "2024-02-28 08:02:40.463", '
        b'"event": "DELTA_CLOSE", "eventLogId": "6b80c392-3198-492f-a631"}'
    )
    assert value == b'{"deltaNum": 8, "deltaDate": "2024-04-28 08:02:40"}'
    _, value = encode_signal(event_of(WriteOk("proxy_sales", None, None, 5)))
    assert value == b'{"entity": "proxy_sales", "cn": null, "ts": null, "rowsAffected": 5}'
    _, value = encode_signal(
        event_of(SchemaChanged("marketing", change_date_time=at("2024-04-24 15:25:47.002")))
    )
    assert value == b'{"datamart": "marketing", "changeDateTime": "2024-04-24 15:25:47.002"}'


def test_non_ascii_names_round_trip_as_utf8():
    event = event_of(WriteOk("продажи", 1, 2, 3), datamart="маркетинг")
    key, value = encode_signal(event)
    assert "маркетинг".encode() in key and "продажи".encode() in value
    assert b"\\u" not in key + value
    assert decode_signal(key, value) == event
    escaped = key_for("DELTA_OPEN", datamart="\\u043c\\u0430\\u0440")
    assert decode_signal(escaped, b'{"deltaNum": 1}').datamart == "мар"


def test_non_utc_event_round_trips_by_instant():
    event = SignalEvent(
        SignalKey("m", parse_prostore_datetime("2024-02-28 08:02:40.463", MSK), "DELTA_OPEN", "id"),
        DeltaOpen(1),
    )
    key, value = encode_signal(event, tz=MSK)
    assert b'"2024-02-28 08:02:40.463"' in key
    assert decode_signal(key, value, tz=MSK) == event


# --- Nulls, unknown events, BOM ------------------------------------------------------------------


def test_write_ok_nulls_for_proxy_tables():
    raw = b'{"entity": "proxy_sales", "cn": null, "ts": null, "rowsAffected": 7}'
    assert decode_signal(key_for("WRITE_OK"), raw).value == WriteOk("proxy_sales", None, None, 7)


def test_write_ok_absent_optional_fields_read_as_null():
    assert decode_signal(key_for("WRITE_OK"), b'{"entity": "t"}').value == WriteOk(
        "t", None, None, None
    )


def test_write_cancel_null_cn():
    raw = b'{"entity": "proxy_sales", "cn": null}'
    assert decode_signal(key_for("WRITE_CANCEL"), raw).value == WriteCancel("proxy_sales", None)


def test_unknown_event_is_kept():
    decoded = decode_signal(key_for("DELTA_MERGE"), b'{"deltaNum": 3, "x": [1]}')
    assert decoded.value == UnknownEvent("DELTA_MERGE", {"deltaNum": 3, "x": [1]})
    assert decoded.key.code is None
    assert decoded.delta_num is None
    assert decode_signal(*encode_signal(decoded)) == decoded


@pytest.mark.parametrize("value", [None, b"", b"null"])
def test_unknown_event_without_value(value):
    decoded = decode_signal(key_for("SOMETHING_NEW"), value)
    assert decoded.value == UnknownEvent("SOMETHING_NEW", None)
    assert decode_signal(*encode_signal(decoded)) == decoded


def test_extra_fields_are_ignored():
    key = key_for("DELTA_OPEN").replace(b"}", b', "node": "n1"}')
    assert decode_signal(key, b'{"deltaNum": 4, "extra": true}').value == DeltaOpen(4)


def test_utf8_bom_is_accepted():
    bom = b"\xef\xbb\xbf"
    key, value = bom + SEED_KEY_DELTA_CLOSE.encode(), bom + SEED_VALUE_DELTA_CLOSE.encode()
    decoded = decode_signal(key, value)
    assert decoded.value == DeltaClose(8, at("2024-04-28 08:02:40"))
    assert not encode_signal(decoded)[0].startswith(bom)


def test_delta_num_property():
    assert event_of(DeltaOpen(1)).delta_num == 1
    assert event_of(DeltaCancel(2)).delta_num == 2
    assert event_of(WriteCancel("t", None)).delta_num is None


# --- Bad input ----------------------------------------------------------------------------------

GOOD_KEY = key_for("DELTA_CLOSE")
GOOD_VALUE = b'{"deltaNum": 8, "deltaDate": "2024-04-28 08:02:40"}'


@pytest.mark.parametrize(
    "key, error, reason",
    [
        (b'{"datamart": "marketing",', BadJsonError, "not JSON"),
        (b"", BadJsonError, "not JSON"),
        (b'{"datamart": "\xff"}', BadJsonError, "not UTF-8"),
        (b'["marketing"]', NotASignalKeyError, "key is a JSON array, not an object"),
        (b'"marketing"', NotASignalKeyError, "key is a JSON string, not an object"),
        (b'{"datamart": "m", "datetime": "2024-02-28 08:02:40", "event": "DELTA_CLOSE"}',
         NotASignalKeyError, "key lacks field 'eventLogId'"),
        (b'{"datetime": "2024-02-28 08:02:40", "event": "DELTA_CLOSE", "eventLogId": "x"}',
         NotASignalKeyError, "key lacks field 'datamart'"),
        (b'{"datamart": 5, "datetime": "2024-02-28 08:02:40", "event": "E", "eventLogId": "x"}',
         NotASignalKeyError, "key field 'datamart' must be a non-empty string, got 5"),
        (b'{"datamart": "m", "datetime": "2024-02-28 08:02:40", "event": "", "eventLogId": "x"}',
         NotASignalKeyError, "key field 'event' must be a non-empty string"),
        (b'{"datamart": "m", "datetime": null, "event": "E", "eventLogId": "x"}',
         NotASignalKeyError, "key field 'datetime' must be a non-empty string, got null"),
        (b'{"datamart": "m", "datetime": "2024-02-28", "event": "E", "eventLogId": "x"}',
         NotASignalKeyError, "key field 'datetime': '2024-02-28' is not of the form"),
        (b'{"datamart": "m", "datetime": "2024-02-30 08:02:40", "event": "E", "eventLogId": "x"}',
         NotASignalKeyError, "is not a valid date and time"),
    ],
)
def test_bad_key(key, error, reason):
    with pytest.raises(error) as info:
        decode_signal(key, GOOD_VALUE)
    assert type(info.value) is error
    assert reason in info.value.reason
    assert info.value.part == "key"
    assert info.value.location is None


@pytest.mark.parametrize(
    "event, value, error, reason",
    [
        ("DELTA_CLOSE", b'{"deltaNum": 8,', BadJsonError, "not JSON"),
        ("DELTA_CLOSE", b"\xfe\xff", BadJsonError, "not UTF-8"),
        ("DELTA_CLOSE", b'[8]', BadSignalValueError, "DELTA_CLOSE value is a JSON array"),
        ("DELTA_CLOSE", None, BadSignalValueError, "DELTA_CLOSE value is missing"),
        ("DELTA_OPEN", b"", BadSignalValueError, "DELTA_OPEN value is missing"),
        ("DELTA_OPEN", b"null", BadSignalValueError, "DELTA_OPEN value is missing"),
        ("DELTA_CLOSE", b'{"deltaDate": "2024-04-28 08:02:40"}', BadSignalValueError,
         "DELTA_CLOSE value: lacks field 'deltaNum'"),
        ("DELTA_CLOSE", b'{"deltaNum": null, "deltaDate": "2024-04-28 08:02:40"}',
         BadSignalValueError, "DELTA_CLOSE value: has null field 'deltaNum'"),
        ("DELTA_CLOSE", b'{"deltaNum": "8", "deltaDate": "2024-04-28 08:02:40"}',
         BadSignalValueError, "field 'deltaNum' must be an integer, got string \"8\""),
        ("DELTA_CLOSE", b'{"deltaNum": 8}', BadSignalValueError,
         "DELTA_CLOSE value: lacks field 'deltaDate'"),
        ("DELTA_CLOSE", b'{"deltaNum": 8, "deltaDate": 1714291360}', BadSignalValueError,
         "field 'deltaDate' must be a string, got number 1714291360"),
        ("DELTA_CLOSE", b'{"deltaNum": 8, "deltaDate": "28.04.2024"}', BadSignalValueError,
         "field 'deltaDate': '28.04.2024' is not of the form"),
        ("DELTA_OPEN", b'{"deltaNum": true}', BadSignalValueError,
         "DELTA_OPEN value: field 'deltaNum' must be an integer, got boolean true"),
        ("DELTA_OPEN", b'{"deltaNum": 8.0}', BadSignalValueError,
         "field 'deltaNum' must be an integer, got number 8.0"),
        ("DELTA_CANCEL", b'{"deltaNum": -1}', BadSignalValueError,
         "DELTA_CANCEL value: field 'deltaNum' must be >= 0, got -1"),
        ("WRITE_OK", b'{"cn": 1, "ts": 2, "rowsAffected": 3}', BadSignalValueError,
         "WRITE_OK value: lacks field 'entity'"),
        ("WRITE_OK", b'{"entity": "t", "cn": "1", "ts": 2, "rowsAffected": 3}',
         BadSignalValueError, "field 'cn' must be an integer, got string \"1\""),
        ("WRITE_OK", b'{"entity": "t", "cn": 1, "ts": false, "rowsAffected": 3}',
         BadSignalValueError, "field 'ts' must be an integer, got boolean false"),
        ("WRITE_OK", b'{"entity": "t", "cn": 1, "ts": 2, "rowsAffected": -3}',
         BadSignalValueError, "field 'rowsAffected' must be >= 0"),
        ("WRITE_CANCEL", b'{"entity": ["t"], "cn": 1}', BadSignalValueError,
         "WRITE_CANCEL value: field 'entity' must be a string, got array [\"t\"]"),
        ("DATAMART_SCHEMA_CHANGED", b'{"changeDateTime": "2024-04-24 15:25:47.002"}',
         BadSignalValueError, "DATAMART_SCHEMA_CHANGED value: lacks field 'datamart'"),
        ("DATAMART_SCHEMA_CHANGED", b'{"datamart": "m", "changeDateTime": "yesterday"}',
         BadSignalValueError, "field 'changeDateTime': 'yesterday' is not of the form"),
        ("SOMETHING_NEW", b'[1, 2]', BadSignalValueError, "SOMETHING_NEW value is a JSON array"),
        ("SOMETHING_NEW", b'{"a": ', BadJsonError, "not JSON"),
        # Numbers no writer sends: refused here, not by the index's 64-bit column (which raised
        # OverflowError and stopped the batch) nor by Python's 4300-digit limit (a ValueError).
        ("DELTA_CLOSE", b'{"deltaNum": 1000000001, "deltaDate": "2024-04-28 08:02:40"}', BadSignalValueError,
         "DELTA_CLOSE value: field 'deltaNum' must be <= 1000000000, got 1000000001"),
        ("DELTA_OPEN", b'{"deltaNum": 100000000000000000000}', BadSignalValueError,
         "field 'deltaNum' must be <= 1000000000"),
        ("DELTA_OPEN", b'{"deltaNum": ' + b"9" * 5000 + b"}", BadJsonError,
         "JSON that Python will not read: ValueError: Exceeds the limit (4300 digits)"),
        ("WRITE_OK", b'{"entity": "t", "cn": 1, "ts": 2, "rowsAffected": 9223372036854775808}',
         BadSignalValueError, "field 'rowsAffected' must be <= 9223372036854775807"),
        ("WRITE_CANCEL", b'{"entity": "t", "cn": -9223372036854775809}',
         BadSignalValueError, "field 'cn' must be >= -9223372036854775808"),
        ("SOMETHING_NEW", b"[" * 100_000 + b"]" * 100_000, BadJsonError, "RecursionError"),
    ],
)
def test_bad_value(event, value, error, reason):
    with pytest.raises(error) as info:
        decode_signal(key_for(event), value)
    assert type(info.value) is error
    assert reason in info.value.reason
    assert info.value.part == "value"
    assert info.value.location is None


def test_errors_take_a_location_later():
    with pytest.raises(BadSignalValueError) as info:
        decode_signal(key_for("DELTA_CLOSE"), b'{"deltaNum": 8}')
    located = info.value.located(Location(topic="signals", partition=2, offset=41))
    assert str(located) == (
        "bad_signal_value (value) at topic 'signals' partition 2 offset 41: "
        "DELTA_CLOSE value: lacks field 'deltaDate'"
    )


@pytest.mark.parametrize(
    "code, value",
    [("DELTA_OPEN", DeltaCancel(1)), ("WRITE_OK", WriteCancel("t", 1)),
     ("NEW", DeltaOpen(1)), ("NEW", UnknownEvent("OTHER", None)),
     ("DELTA_OPEN", UnknownEvent("DELTA_OPEN", {"deltaNum": 1}))],
)
def test_encode_refuses_a_value_of_another_event(code, value):
    event = SignalEvent(SignalKey("m", at("2024-02-28 08:02:40"), code, "id"), value)
    with pytest.raises(ValueError, match="cannot carry"):
        encode_signal(event)
