"""The change-stream formats that have an emulator, and their hooks (resources/emulator/hooks.py):
the emulator side of resources/formats/, one layer above it, so that the platform's own path
(sealing, the lake, the config) never loads an emulator.

A format's emulator is registered here by one line: `EMULATED` maps its name to its hooks. The
three first formats' emulators live in this package (qlik.py, dataworks.py, datastream.py, with the
oracle of stream_truths.py); a format in a folder of its own keeps its hooks there
(resources/formats/debezium/emulated.py).
"""

from __future__ import annotations

from resources.emulator.datastream import DATASTREAM, DatastreamConfig, build_datastream_story
from resources.emulator.dataworks import ROLE as DATAWORKS, DataWorksConfig, build_dataworks_story
from resources.emulator.hooks import DemoSource, EmulatorHooks
from resources.emulator.qlik import QLIK, QlikConfig, build_qlik_story
from resources.emulator.stream_truths import (datastream_final, datastream_truth, dataworks_final, dataworks_truth,
                                              qlik_final, qlik_truth)
from resources.formats.debezium import emulated as debezium


def _qlik_demo(seed: int, deltas: int) -> DemoSource:
    story = build_qlik_story(QlikConfig(seed=seed, transactions=max(6, 3 * deltas),
                                        ddl_at_transaction=max(3, deltas), rollback_at_transaction=2))
    return DemoSource("sales_qlik", "qlik.sales", story, {"max_rows": 12, "max_seconds": 3600})


def _dataworks_demo(seed: int, deltas: int) -> DemoSource:
    story = build_dataworks_story(DataWorksConfig(seed=seed, transactions=max(8, 4 * deltas),
                                                  alter_at=max(4, 2 * deltas), failover_rate=0.2))
    return DemoSource("shop_dataworks", "dataworks.shop", story, {"max_rows": 15, "max_seconds": 120})


def _datastream_demo(seed: int, deltas: int) -> DemoSource:
    story = build_datastream_story(DatastreamConfig(seed=seed, steps=max(40, 15 * deltas)))
    return DemoSource("shop_datastream", "datastream.shop", story,
                      {"max_rows": 40, "max_seconds": 60, "lateness_seconds": story.max_lateness_us / 1e6})


EMULATED: dict[str, EmulatorHooks] = {
    QLIK: EmulatorHooks(
        story=lambda seed, size, wire: build_qlik_story(QlikConfig(seed=seed, transactions=size or 24, format=wire)),
        demo=_qlik_demo, truth_after=lambda story, records, _wm: qlik_truth(story, records), final_truth=qlik_final,
        wires=("json", "avro")),
    DATAWORKS: EmulatorHooks(
        story=lambda seed, size, _wire: build_dataworks_story(DataWorksConfig(seed=seed, transactions=size or 40)),
        demo=_dataworks_demo, truth_after=lambda story, records, _wm: dataworks_truth(story, records),
        final_truth=dataworks_final),
    DATASTREAM: EmulatorHooks(
        story=lambda seed, size, wire: build_datastream_story(DatastreamConfig(seed=seed, steps=size or 200, fmt=wire)),
        demo=_datastream_demo, truth_after=datastream_truth, final_truth=datastream_final,
        undefined_because="the backfill is still arriving", wires=("json", "avro"), size_means="steps"),
    debezium.NAME: debezium.HOOKS,
}


def emulator_hooks(name: str) -> EmulatorHooks | None:
    """The emulator of format `name`, or None when it has none."""
    return EMULATED.get(name)
