"""What a change-stream format provides to the platform: one `StreamFormat` per format.

A format (Qlik Replicate, DataWorks, Datastream, Debezium, ...) is a wire codec plus three facts
the shared path needs: how its messages decode into the normalized records
(resources/codecs/cdc.py), where its stream may be cut into deltas (an observer,
resources/formats/boundaries.py), and which Spark type each source type name lands as.
The emulator side (a story with its oracle) is registered apart, one layer up
(resources/emulator/formats.py): the demo, `deltaport emulate` and the tests use it, a deployment
never loads it. Everything here is plain data and functions: the sealer, the lake and the config
read it through `resources.formats.stream_format(name)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from resources.codecs.cdc import Record

Decode = Callable[[bytes | None, bytes | None], list[Record]]  # (key, value or None: a tombstone)
Observer = Callable[[list[Record] | None, dict, Any], tuple[str, int | None, int | None, int]]


@dataclass(frozen=True)
class StreamFormat:
    """One change-stream format, as registered in resources/formats/__init__.py."""

    name: str  # the config's `format:` and the records' `Change.source`
    # A decoder ready for the stream's messages; `metadata` are the messages this format asked the
    # ledger to keep (`keeps_metadata`), in order, from before the first message to decode.
    decoder: Callable[[Iterable[Any]], Decode]
    observe: Observer  # where a delta may end (resources/formats/boundaries.py)
    column_types: Mapping[str, str] = field(default_factory=dict)  # source type name -> Spark type name
    keeps_metadata: bool = False  # the ledger keeps its schema messages (Qlik metadata messages)
