"""What a change-stream format's emulator provides to the demo, `deltaport emulate` and the tests:
a story of messages and the oracle that knows the true rows after each sealed delta.

A deployment never needs this: the format's wire side (resources/formats/spec.py) is all the
platform reads. Registered per format in resources/emulator/formats.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from resources.codecs.cdc import Record

Rows = dict[str, list[dict]]  # lake table -> rows


@dataclass(frozen=True)
class DemoSource:
    """A source of the demo: its name, topic, story and sealing limits (config keys)."""

    name: str
    topic: str
    story: Any
    limits: Mapping[str, Any]


@dataclass(frozen=True)
class EmulatorHooks:
    """The format's emulator and oracle, for the demo, `deltaport emulate` and the tests."""

    story: Callable[[int, int | None, str], Any]  # (seed, size or None: its default, wire form)
    # The true rows per lake table after a delta (records of every delta so far, its watermark),
    # or None where the truth is not defined (e.g. inside a full load).
    truth_after: Callable[[Any, Sequence[Record], int | None], Rows | None]
    final_truth: Callable[[Any], Rows]
    demo: Callable[[int, int], DemoSource] | None = None  # (seed, deltas the demo wants); None: not in the demo
    undefined_because: str = "the full load is still arriving"  # why truth_after gave None
    wires: tuple[str, ...] = ("json",)  # wire forms `deltaport emulate --wire` accepts
    size_means: str = "transactions"  # what `deltaport emulate --size` counts
