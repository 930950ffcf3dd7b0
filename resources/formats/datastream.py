"""Google Cloud Datastream's events as a registered format: its codec (resources/codecs/datastream.py),
its event-time watermark (every message a boundary), its Avro type names. Its emulator:
resources/emulator/formats.py."""

from __future__ import annotations

from collections.abc import Iterable

from resources.formats.boundaries import observe_datastream
from resources.codecs.datastream import decode_datastream
from resources.formats.spec import Decode, StreamFormat

# The Avro payload field's type or logical type (JSON events carry no types).
COLUMN_TYPES = {
    "int": "bigint", "long": "bigint", "float": "double", "double": "double", "boolean": "boolean",
    "string": "string", "bytes": "binary", "date": "date", "timestamp-millis": "timestamp_ntz",
    "timestamp-micros": "timestamp_ntz", "local-timestamp-millis": "timestamp_ntz",
    "local-timestamp-micros": "timestamp_ntz", "time-millis": "bigint", "time-micros": "bigint", "uuid": "string",
}


def decoder(_metadata: Iterable) -> Decode:
    return lambda key, value: [] if value is None else decode_datastream(key, value)


FORMAT = StreamFormat(
    name="datastream", decoder=decoder, observe=observe_datastream, column_types=COLUMN_TYPES,
)
