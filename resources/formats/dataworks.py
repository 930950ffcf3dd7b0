"""Alibaba DataWorks' sync to Kafka as a registered format: its codec (resources/codecs/dataworks.py),
its heartbeat boundaries, its type names, and its emulator (resources/emulator/dataworks.py) with
the oracle of resources/emulator/stream_truths.py."""

from __future__ import annotations

from collections.abc import Iterable

from resources.changestream.boundaries import observe_dataworks
from resources.codecs.dataworks import decode_dataworks
from resources.emulator.dataworks import ROLE as DATAWORKS, DataWorksConfig, build_dataworks_story
from resources.emulator.stream_truths import dataworks_final, dataworks_truth
from resources.formats.spec import Decode, DemoSource, EmulatorHooks, StreamFormat

# DATE is epoch milliseconds with a time of day (resources/codecs/dataworks.py).
COLUMN_TYPES = {"BOOLEAN": "boolean", "DOUBLE": "double", "DATE": "timestamp_ntz", "BYTES": "binary",
                "LONG": "bigint", "STRING": "string"}


def decoder(_metadata: Iterable) -> Decode:
    return lambda key, value: [] if value is None else decode_dataworks(key, value)


def demo(seed: int, deltas: int) -> DemoSource:
    story = build_dataworks_story(DataWorksConfig(seed=seed, transactions=max(8, 4 * deltas),
                                                  alter_at=max(4, 2 * deltas), failover_rate=0.2))
    return DemoSource("shop_dataworks", "dataworks.shop", story, {"max_rows": 15, "max_seconds": 120})


FORMAT = StreamFormat(
    name=DATAWORKS, decoder=decoder, observe=observe_dataworks, column_types=COLUMN_TYPES,
    emulator=EmulatorHooks(
        story=lambda seed, size, _wire: build_dataworks_story(DataWorksConfig(seed=seed, transactions=size or 40)),
        demo=demo, truth_after=lambda story, records, _wm: dataworks_truth(story, records),
        final_truth=dataworks_final),
)
