"""Alibaba DataWorks' sync to Kafka as a registered format: its codec (resources/codecs/dataworks.py),
its heartbeat boundaries, its type names. Its emulator: resources/emulator/formats.py."""

from __future__ import annotations

from collections.abc import Iterable

from resources.formats.boundaries import observe_dataworks
from resources.codecs.dataworks import decode_dataworks
from resources.formats.spec import Decode, StreamFormat

# DATE is epoch milliseconds with a time of day (resources/codecs/dataworks.py).
COLUMN_TYPES = {"BOOLEAN": "boolean", "DOUBLE": "double", "DATE": "timestamp_ntz", "BYTES": "binary",
                "LONG": "bigint", "STRING": "string"}


def decoder(_metadata: Iterable) -> Decode:
    return lambda key, value: [] if value is None else decode_dataworks(key, value)


FORMAT = StreamFormat(
    name="dataworks", decoder=decoder, observe=observe_dataworks, column_types=COLUMN_TYPES,
)
