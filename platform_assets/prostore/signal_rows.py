"""Deltas' signal events as rows of the `signal_events` Iceberg table."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence


from resources.codecs.signal import DeltaClose, SchemaChanged, WriteCancel, WriteOk, decode_signal
from platform_assets.io_managers.prostore import SignalSlice

COLUMNS = [
    ("delta_num", "long"), ("attempt", "int"), ("topic", "string"), ("partition", "int"), ("offset", "long"),
    ("event_log_id", "string"), ("code", "string"), ("event_time", "timestamp_ntz"),
    ("entity", "string"), ("cn", "long"), ("ts", "long"), ("rows_affected", "long"),
    ("delta_date", "timestamp_ntz"), ("key_json", "string"), ("value_json", "string"),
]


def _naive_utc(value: dt.datetime | None) -> dt.datetime | None:
    return value.astimezone(dt.timezone.utc).replace(tzinfo=None) if value is not None else None


def signal_rows(signal: SignalSlice) -> list[tuple]:
    rows = []
    for e in signal.events:
        event = decode_signal(e["key"], e["value"])  # stored because it decoded: cannot fail here
        v = event.value
        entity = v.entity if isinstance(v, (WriteOk, WriteCancel)) else (v.entity_name if isinstance(v, SchemaChanged) else None)
        rows.append((
            signal.delta_num, e["attempt"], e["topic"], e["partition"], e["offset"], e["event_log_id"], e["code"],
            _naive_utc(event.key.datetime), entity,
            v.cn if isinstance(v, (WriteOk, WriteCancel)) else None,
            v.ts if isinstance(v, WriteOk) else None,
            v.rows_affected if isinstance(v, WriteOk) else None,
            _naive_utc(v.delta_date) if isinstance(v, DeltaClose) else None,
            e["key"].decode("utf-8"), e["value"].decode("utf-8") if e["value"] else None,
        ))
    return rows


def signal_frame(spark, signals: Sequence[SignalSlice]):
    """One frame of the events of every given delta."""
    schema = ", ".join(f"`{name}` {typ}" for name, typ in COLUMNS)
    return spark.createDataFrame([row for s in signals for row in signal_rows(s)], schema)


