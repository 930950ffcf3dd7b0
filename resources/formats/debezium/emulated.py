"""Debezium's emulator side (resources/emulator/hooks.py): the story of emulator.py and the oracle
of oracle.py, for the demo, `deltaport emulate` and the tests; registered in
resources/emulator/formats.py. The platform's path never imports it."""

from __future__ import annotations

from resources.emulator.hooks import EmulatorHooks
from resources.formats.debezium.codec import SOURCE as NAME
from resources.formats.debezium.emulator import DebeziumConfig, build_debezium_story
from resources.formats.debezium.oracle import debezium_final, debezium_truth

# Not in `deltaport demo` yet (demo=None): a fifth demo source lengthens the demo and its tests.
HOOKS = EmulatorHooks(
    story=lambda seed, size, wire: build_debezium_story(
        DebeziumConfig(seed=seed, transactions=size or 30, wire="json" if wire == "json" else "schemaless")),
    truth_after=debezium_truth, final_truth=debezium_final,
    undefined_because="the initial snapshot is still arriving", wires=("json", "schemaless"))
