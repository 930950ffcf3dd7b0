"""Debezium change events (PostgreSQL and MySQL connectors, JSON converter) as a registered format.

What it provides (resources/formats/spec.py): the codec (codec.py, values.py) into the normalized
records, the boundary rule (boundaries.py: transaction END, or a change outside transactions),
the Connect type names' Spark types, and the emulator (emulator.py) with its oracle (oracle.py).
Everything Debezium-specific lives in this folder; resources/formats/__init__.py registers it.
"""

from __future__ import annotations

from collections.abc import Iterable

from resources.formats.debezium.boundaries import observe_debezium
from resources.formats.debezium.codec import SOURCE, decode_debezium
from resources.formats.debezium.emulator import DebeziumConfig, build_debezium_story
from resources.formats.debezium.oracle import debezium_final, debezium_truth
from resources.formats.spec import Decode, EmulatorHooks, StreamFormat

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


# Not in `deltaport demo` yet (demo=None): a fifth demo source lengthens the demo and its tests.


FORMAT = StreamFormat(
    name=SOURCE, decoder=decoder, observe=observe_debezium, column_types=COLUMN_TYPES,
    emulator=EmulatorHooks(
        story=lambda seed, size, wire: build_debezium_story(
            DebeziumConfig(seed=seed, transactions=size or 30, wire="json" if wire == "json" else "schemaless")),
        truth_after=debezium_truth, final_truth=debezium_final,
        undefined_because="the initial snapshot is still arriving", wires=("json", "schemaless")),
)
