"""What a change-stream format provides to the platform: one `StreamFormat` per format.

A format (Qlik Replicate, DataWorks, Datastream, Debezium, ...) is a wire codec plus three facts
the shared path needs: how its messages decode into the normalized records
(resources/codecs/cdc.py), where its stream may be cut into deltas (an observer,
resources/changestream/boundaries.py), and which Spark type each source type name lands as.
The emulator side (a story with its oracle) is optional: the demo, `deltaport emulate` and the
tests use it, a deployment never does. Everything here is plain data and functions: the sealer,
the lake and the CLI read it through `resources.formats.stream_format(name)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from resources.codecs.cdc import Record

Decode = Callable[[bytes | None, bytes | None], list[Record]]  # (key, value or None: a tombstone)
Observer = Callable[[list[Record] | None, dict, Any], tuple[str, int | None, int | None, int]]
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


@dataclass(frozen=True)
class StreamFormat:
    """One change-stream format, as registered in resources/formats/__init__.py."""

    name: str  # the config's `format:` and the records' `Change.source`
    # A decoder ready for the stream's messages; `metadata` are the messages this format asked the
    # ledger to keep (`keeps_metadata`), in order, from before the first message to decode.
    decoder: Callable[[Iterable[Any]], Decode]
    observe: Observer  # where a delta may end (resources/changestream/boundaries.py)
    column_types: Mapping[str, str] = field(default_factory=dict)  # source type name -> Spark type name
    keeps_metadata: bool = False  # the ledger keeps its schema messages (Qlik metadata messages)
    emulator: EmulatorHooks | None = None
