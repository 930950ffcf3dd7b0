"""Google Cloud Datastream's events as a registered format: its codec (resources/codecs/datastream.py),
its event-time watermark (every message a boundary), its Avro type names, and its emulator
(resources/emulator/datastream.py) with the oracle of resources/emulator/stream_truths.py."""

from __future__ import annotations

from collections.abc import Iterable

from resources.changestream.boundaries import observe_datastream
from resources.codecs.datastream import decode_datastream
from resources.emulator.datastream import DATASTREAM, DatastreamConfig, build_datastream_story
from resources.emulator.stream_truths import datastream_final, datastream_truth
from resources.formats.spec import Decode, DemoSource, EmulatorHooks, StreamFormat

# The Avro payload field's type or logical type (JSON events carry no types).
COLUMN_TYPES = {
    "int": "bigint", "long": "bigint", "float": "double", "double": "double", "boolean": "boolean",
    "string": "string", "bytes": "binary", "date": "date", "timestamp-millis": "timestamp_ntz",
    "timestamp-micros": "timestamp_ntz", "local-timestamp-millis": "timestamp_ntz",
    "local-timestamp-micros": "timestamp_ntz", "time-millis": "bigint", "time-micros": "bigint", "uuid": "string",
}


def decoder(_metadata: Iterable) -> Decode:
    return lambda key, value: [] if value is None else decode_datastream(key, value)


def demo(seed: int, deltas: int) -> DemoSource:
    story = build_datastream_story(DatastreamConfig(seed=seed, steps=max(40, 15 * deltas)))
    return DemoSource("shop_datastream", "datastream.shop", story,
                      {"max_rows": 40, "max_seconds": 60, "lateness_seconds": story.max_lateness_us / 1e6})


FORMAT = StreamFormat(
    name=DATASTREAM, decoder=decoder, observe=observe_datastream, column_types=COLUMN_TYPES,
    emulator=EmulatorHooks(
        story=lambda seed, size, wire: build_datastream_story(DatastreamConfig(seed=seed, steps=size or 200, fmt=wire)),
        demo=demo, truth_after=datastream_truth, final_truth=datastream_final,
        undefined_because="the backfill is still arriving", wires=("json", "avro"), size_means="steps"),
)
