"""Codec of the Prostore signal topic (`KAFKA_STATUS_EVENT_TOPIC`): JSON key + JSON value.

Flow: the signal scanner hands `decode_signal` the raw key and value bytes of one Kafka message
and gets back a `SignalEvent` (a typed key and one typed value per event code); the emulator and
tests go the other way with `encode_signal`.

Guarantees:
- Pure: bytes in, frozen dataclasses out. No Dagster, no Kafka client, no location: a caller
  that knows the topic/partition/offset pins it on the error with `DecodeError.located()`.
- Bad input raises exactly one of three typed errors, with `part` set to "key" or "value":
  `BadJsonError` (not UTF-8 JSON, or JSON Python will not read: an integer of more than 4300
  digits, nesting deeper than the interpreter's recursion limit), `NotASignalKeyError` (key is
  not a signal key), `BadSignalValueError` (value does not fit its event code, a deltaNum
  outside 0..`limits.MAX_DELTA_NUM`, or a cn, ts or rowsAffected beyond a long: the index and
  the lake keep them in 64-bit columns).
- An event code this codec does not know is kept as `UnknownEvent` with its JSON object, never an
  error: Prostore may add events, and a newer Prostore must not stop the platform. Its value
  must still be a JSON object (or absent), as every signal value is by the seed.
- Datetimes ("YYYY-MM-DD hh:mm:ss[.fraction]", fraction of 1..9 digits) are read to microsecond
  precision as timezone-aware datetimes, UTC unless a `tz` is given; they are written back with
  0, 3 or 6 fraction digits, so every datetime in the seed's examples round-trips as the same text.
- `encode_signal` writes one-line JSON with the fields in the seed's order and non-ASCII names as
  UTF-8 (not \\u escapes); `decode_signal(*encode_signal(e)) == e` for every event.
- Tolerated on input, never written: a UTF-8 BOM in front of the JSON (some tools that replay
  topics from files add one), extra fields in key or value (forward compatibility).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from enum import Enum
from typing import Any, Union

from resources.codecs.json_text import json_type as _json_type
from resources.codecs.json_text import BEYOND_LIMITS, beyond_limits
from resources.codecs.json_text import show as _show
from resources.codecs.limits import LONG_MAX, LONG_MIN, MAX_DELTA_NUM
from resources.errors import BadJsonError, BadSignalValueError, NotASignalKeyError

# ---------------------------------------------------------------------------------------------
# Datetimes
# ---------------------------------------------------------------------------------------------

_DATETIME_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")


def parse_prostore_datetime(text: str, tz: tzinfo = timezone.utc) -> datetime:
    """Parse Prostore's "YYYY-MM-DD hh:mm:ss[.fraction]" into an aware datetime in `tz`.

    The fraction may have any length from 1 to 9 digits (".5", ".002", ".463", nanoseconds);
    digits beyond microseconds are truncated, as Python datetimes stop there.
    Raises ValueError when `text` is not of that form or is not a real date and time.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a string, got {type(text).__name__}")
    match = _DATETIME_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not of the form 'YYYY-MM-DD hh:mm:ss[.fraction]'")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction = match.group(7) or ""
    # ".5" is half a second: right-pad to 6 digits, then drop what is finer than a microsecond.
    micros = int((fraction + "000000")[:6])
    try:
        return datetime(year, month, day, hour, minute, second, micros, tzinfo=tz)
    except ValueError as exc:  # e.g. month 13, February 30th, hour 24
        raise ValueError(f"{text!r} is not a valid date and time: {exc}") from None


def format_prostore_datetime(dt: datetime, tz: tzinfo = timezone.utc) -> str:
    """Write `dt` as Prostore does: no fraction on whole seconds, milliseconds when that is
    exact, else microseconds. An aware `dt` is first converted to `tz`; a naive one is written
    as is. So `parse(format(dt)) == dt` and `format(parse(s)) == s` for every seed example."""
    if dt.tzinfo is not None:
        dt = dt.astimezone(tz)
    text = dt.strftime("%Y-%m-%d %H:%M:%S")
    if dt.microsecond == 0:
        return text
    if dt.microsecond % 1000 == 0:
        return f"{text}.{dt.microsecond // 1000:03d}"
    return f"{text}.{dt.microsecond:06d}"


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


class EventCode(str, Enum):
    """The event codes the seed defines."""

    DATAMART_SCHEMA_CHANGED = "DATAMART_SCHEMA_CHANGED"
    DELTA_OPEN = "DELTA_OPEN"
    DELTA_CLOSE = "DELTA_CLOSE"
    DELTA_CANCEL = "DELTA_CANCEL"
    WRITE_OK = "WRITE_OK"
    WRITE_CANCEL = "WRITE_CANCEL"


@dataclass(frozen=True)
class SignalKey:
    """A signal message's key. `event` is the raw code (also for codes unknown to us);
    `event_log_id` is the de-duplication key, since Kafka delivery is at-least-once."""

    datamart: str
    datetime: datetime
    event: str
    event_log_id: str

    @property
    def code(self) -> EventCode | None:
        """The event code as an `EventCode`, or None when the code is unknown."""
        try:
            return EventCode(self.event)
        except ValueError:
            return None


@dataclass(frozen=True)
class DeltaOpen:
    delta_num: int


@dataclass(frozen=True)
class DeltaClose:
    delta_num: int
    delta_date: datetime  # the delta's commit time


@dataclass(frozen=True)
class DeltaCancel:
    delta_num: int


@dataclass(frozen=True)
class WriteOk:
    entity: str
    cn: int | None  # write operation number; null for proxy and standalone tables
    ts: int | None  # microseconds since the Unix epoch; null for proxy and standalone tables
    rows_affected: int | None  # inserted + changed + deleted rows


@dataclass(frozen=True)
class WriteCancel:
    entity: str
    cn: int | None


@dataclass(frozen=True)
class SchemaChanged:
    # The seed's template lists four fields but its own example has only datamart and
    # changeDateTime, so everything but the datamart is optional.
    datamart: str
    entity_name: str | None = None
    entity_definition: str | None = None  # e.g. "TABLE.DEFAULT", "VIEW.PLAIN.FILTERED"
    change_date_time: datetime | None = None


@dataclass(frozen=True)
class UnknownEvent:
    """An event whose code this codec does not know: kept, not dropped, not an error."""

    code: str
    payload: dict[str, Any] | None  # the value's JSON object; None when there is no value


SignalValue = Union[
    DeltaOpen, DeltaClose, DeltaCancel, WriteOk, WriteCancel, SchemaChanged, UnknownEvent
]

_VALUE_TYPES: dict[EventCode, type] = {
    EventCode.DATAMART_SCHEMA_CHANGED: SchemaChanged,
    EventCode.DELTA_OPEN: DeltaOpen,
    EventCode.DELTA_CLOSE: DeltaClose,
    EventCode.DELTA_CANCEL: DeltaCancel,
    EventCode.WRITE_OK: WriteOk,
    EventCode.WRITE_CANCEL: WriteCancel,
}


@dataclass(frozen=True)
class SignalEvent:
    """One decoded signal message."""

    key: SignalKey
    value: SignalValue

    @property
    def event_log_id(self) -> str:
        return self.key.event_log_id

    @property
    def datamart(self) -> str:
        return self.key.datamart

    @property
    def code(self) -> EventCode | None:
        return self.key.code

    @property
    def delta_num(self) -> int | None:
        """The delta number for DELTA_OPEN/CLOSE/CANCEL; None for the other events."""
        return getattr(self.value, "delta_num", None)


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------

_BOM = b"\xef\xbb\xbf"


def _load_json(data: bytes, part: str) -> Any:
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJsonError(f"not UTF-8: {exc}", part=part) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadJsonError(f"not JSON: {exc}", part=part) from None
    except BEYOND_LIMITS as exc:
        raise BadJsonError(beyond_limits(exc), part=part) from None





def _decode_key(data: bytes, tz: tzinfo) -> SignalKey:
    obj = _load_json(data, "key")
    if not isinstance(obj, dict):
        raise NotASignalKeyError(f"key is a JSON {_json_type(obj)}, not an object", part="key")
    fields = {}
    for name in ("datamart", "datetime", "event", "eventLogId"):
        if name not in obj:
            raise NotASignalKeyError(f"key lacks field {name!r}", part="key")
        if not isinstance(obj[name], str) or not obj[name]:
            shown = _show(obj[name])
            raise NotASignalKeyError(
                f"key field {name!r} must be a non-empty string, got {shown}", part="key"
            )
        fields[name] = obj[name]
    try:
        when = parse_prostore_datetime(fields["datetime"], tz)
    except ValueError as exc:
        raise NotASignalKeyError(f"key field 'datetime': {exc}", part="key") from None
    return SignalKey(fields["datamart"], when, fields["event"], fields["eventLogId"])


class _Fields:
    """Typed reads of one value object; every failure names the event and the field."""

    def __init__(self, code: str, obj: dict[str, Any], tz: tzinfo):
        self.code, self.obj, self.tz = code, obj, tz

    def _fail(self, reason: str) -> BadSignalValueError:
        return BadSignalValueError(f"{self.code} value: {reason}", part="value")

    def _get(self, name: str, required: bool) -> Any:
        if name not in self.obj or self.obj[name] is None:
            if required:
                what = "lacks" if name not in self.obj else "has null"
                raise self._fail(f"{what} field {name!r}")
            return None
        return self.obj[name]

    def int_field(self, name: str, *, required: bool, min_value: int | None = None,
                  max_value: int | None = None) -> int | None:
        value = self._get(name, required)
        # bool is an int subclass in Python, but `true` is not a number in JSON.
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            shown = f"{_json_type(value)} {_show(value)}"
            raise self._fail(f"field {name!r} must be an integer, got {shown}")
        if value is not None and min_value is not None and value < min_value:
            raise self._fail(f"field {name!r} must be >= {min_value}, got {_show(value)}")
        if value is not None and max_value is not None and value > max_value:
            raise self._fail(f"field {name!r} must be <= {max_value}, got {_show(value)}")
        return value

    def str_field(self, name: str, *, required: bool) -> str | None:
        value = self._get(name, required)
        if value is not None and not isinstance(value, str):
            shown = f"{_json_type(value)} {_show(value)}"
            raise self._fail(f"field {name!r} must be a string, got {shown}")
        return value

    def datetime_field(self, name: str, *, required: bool) -> datetime | None:
        text = self.str_field(name, required=required)
        if text is None:
            return None
        try:
            return parse_prostore_datetime(text, self.tz)
        except ValueError as exc:
            raise self._fail(f"field {name!r}: {exc}") from None


def _decode_value(code: EventCode, obj: dict[str, Any], tz: tzinfo) -> SignalValue:
    f = _Fields(code.value, obj, tz)
    if code is EventCode.DELTA_OPEN:
        return DeltaOpen(f.int_field("deltaNum", required=True, min_value=0, max_value=MAX_DELTA_NUM))
    if code is EventCode.DELTA_CLOSE:
        delta_num = f.int_field("deltaNum", required=True, min_value=0, max_value=MAX_DELTA_NUM)
        return DeltaClose(delta_num, f.datetime_field("deltaDate", required=True))
    if code is EventCode.DELTA_CANCEL:
        return DeltaCancel(f.int_field("deltaNum", required=True, min_value=0, max_value=MAX_DELTA_NUM))
    if code is EventCode.WRITE_OK:
        # cn and ts are null for proxy and standalone tables (seed); an absent field is read the
        # same way rather than rejected, since nothing downstream depends on WRITE_* being there.
        return WriteOk(
            f.str_field("entity", required=True),
            f.int_field("cn", required=False, min_value=LONG_MIN, max_value=LONG_MAX),
            f.int_field("ts", required=False, min_value=LONG_MIN, max_value=LONG_MAX),
            f.int_field("rowsAffected", required=False, min_value=0, max_value=LONG_MAX),
        )
    if code is EventCode.WRITE_CANCEL:
        return WriteCancel(f.str_field("entity", required=True),
                           f.int_field("cn", required=False, min_value=LONG_MIN, max_value=LONG_MAX))
    return SchemaChanged(
        f.str_field("datamart", required=True),
        f.str_field("entityName", required=False),
        f.str_field("entityDefinition", required=False),
        f.datetime_field("changeDateTime", required=False),
    )


def decode_signal(key: bytes, value: bytes | None, *, tz: tzinfo = timezone.utc) -> SignalEvent:
    """Decode one signal message. `value` None, empty or JSON `null` means "no value": an
    error for the six known events (each has a body), `payload=None` for an unknown one."""
    signal_key = _decode_key(key, tz)
    obj = None if not value else _load_json(value, "value")
    if obj is not None and not isinstance(obj, dict):
        raise BadSignalValueError(
            f"{signal_key.event} value is a JSON {_json_type(obj)}, not an object", part="value"
        )
    code = signal_key.code
    if code is None:
        return SignalEvent(signal_key, UnknownEvent(signal_key.event, obj))
    if obj is None:
        raise BadSignalValueError(f"{code.value} value is missing", part="value")
    return SignalEvent(signal_key, _decode_value(code, obj, tz))


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


def _dumps(obj: Any) -> bytes:
    # ensure_ascii=False: Cyrillic datamart and table names stay readable UTF-8, as Prostore writes.
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _value_object(value: SignalValue, tz: tzinfo) -> dict[str, Any] | None:
    # Field order follows the seed's value table.
    if isinstance(value, (DeltaOpen, DeltaCancel)):
        return {"deltaNum": value.delta_num}
    if isinstance(value, DeltaClose):
        delta_date = format_prostore_datetime(value.delta_date, tz)
        return {"deltaNum": value.delta_num, "deltaDate": delta_date}
    if isinstance(value, WriteOk):
        rows = value.rows_affected
        return {"entity": value.entity, "cn": value.cn, "ts": value.ts, "rowsAffected": rows}
    if isinstance(value, WriteCancel):
        return {"entity": value.entity, "cn": value.cn}
    if isinstance(value, SchemaChanged):
        # Absent optional fields are left out, as in the seed's own example.
        obj: dict[str, Any] = {"datamart": value.datamart}
        if value.entity_name is not None:
            obj["entityName"] = value.entity_name
        if value.entity_definition is not None:
            obj["entityDefinition"] = value.entity_definition
        if value.change_date_time is not None:
            obj["changeDateTime"] = format_prostore_datetime(value.change_date_time, tz)
        return obj
    return value.payload


def encode_signal(event: SignalEvent, *, tz: tzinfo = timezone.utc) -> tuple[bytes, bytes]:
    """Encode an event as Prostore writes it: (key, value), both UTF-8 JSON.
    An `UnknownEvent` without payload is written as the JSON `null`.
    Raises ValueError when the value's type does not match the key's event code."""
    key, value = event.key, event.value
    code = key.code
    expected = UnknownEvent if code is None else _VALUE_TYPES[code]
    unknown_mismatch = isinstance(value, UnknownEvent) and value.code != key.event
    if not isinstance(value, expected) or unknown_mismatch:
        raise ValueError(f"event {key.event!r} cannot carry a {type(value).__name__} value")
    key_obj = {
        "datamart": key.datamart,
        "datetime": format_prostore_datetime(key.datetime, tz),
        "event": key.event,
        "eventLogId": key.event_log_id,
    }
    return _dumps(key_obj), _dumps(_value_object(value, tz))
