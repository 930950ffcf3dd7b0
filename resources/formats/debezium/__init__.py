"""Debezium change events (PostgreSQL and MySQL connectors, JSON converter) as a registered format.

What it provides (resources/formats/spec.py): the codec (codec.py, values.py) into the normalized
records, the boundary rule (boundaries.py: transaction END, or a change outside transactions),
the Connect type names' Spark types; its emulator (emulator.py) and oracle (oracle.py), registered
by emulated.py in resources/emulator/formats.py.
Everything Debezium-specific lives in this folder; resources/formats/__init__.py registers it.
"""

from __future__ import annotations

from collections.abc import Iterable

from resources.formats.debezium.boundaries import observe_debezium
from resources.formats.debezium.codec import SOURCE, decode_debezium
from resources.formats.spec import Decode, StreamFormat

# Connect types and logical names -> Spark types; a decimal with its precision arrives as
# decimal(p,s) (values.type_name) and is typed by that.
COLUMN_TYPES = {
    "int8": "bigint", "int16": "bigint", "int32": "bigint", "int64": "bigint", "float32": "double",
    "float64": "double", "boolean": "boolean", "string": "string", "bytes": "binary",
    "io.debezium.time.Date": "date", "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.Timestamp": "timestamp_ntz", "io.debezium.time.MicroTimestamp": "timestamp_ntz",
    "io.debezium.time.NanoTimestamp": "timestamp_ntz", "org.apache.kafka.connect.data.Timestamp": "timestamp_ntz",
    "io.debezium.time.ZonedTimestamp": "timestamp_ntz",
}


def decoder(_metadata: Iterable) -> Decode:
    return decode_debezium  # every message stands alone: the schema travels in each envelope


FORMAT = StreamFormat(
    name=SOURCE, decoder=decoder, observe=observe_debezium, column_types=COLUMN_TYPES,
)
