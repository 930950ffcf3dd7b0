"""The IO manager of change topics whose deltas the platform seals (Qlik, DataWorks, Datastream).

The topic is a source asset; an asset partitioned by delta takes it as input and gets one
`StreamSlice` per delta of its run (a range run has several): delta N's offset ranges from the
ledger (`resources.changestream.ledger`: sealed once, the same offsets forever) and what is needed to
read them. Loading reads no message; `read()`
does, partition by partition in offset order, each message with its decoded records or its
located `DecodeError` (a Qlik decoder is primed with the metadata messages the ledger kept, so
a delta decodes even after retention deleted the messages that described its tables).
A delta the ledger has not sealed fails the load with a `dg.Failure` that says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import dagster as dg

from platform_assets.io_managers.inputs import INPUT_TAG_PREFIX, input_metadata, run_deltas
from resources.changestream.ledger import CdcLedger, LedgerError, SealedDelta
from resources.codecs.cdc import Record
from resources.errors import DecodeError
from resources.changestream.resource import CdcLedgerResource
from resources.kafka.resource import KafkaResource
from resources.kafka.scan import RawMessage
from resources.changestream.sealing import read_delta


@dataclass(frozen=True)
class StreamSlice:
    """Delta N of one change-stream source: its offset ranges and how to read them."""

    source: str
    format: str
    delta: SealedDelta
    ledger: CdcLedger
    bootstrap: str
    consumer_config: dict
    timeout: float

    @property
    def delta_num(self) -> int:
        return self.delta.delta_num

    @property
    def topic(self) -> str:
        return self.delta.topic

    def offsets(self) -> dict[str, list[int]]:
        """{partition: [start, end exclusive]} of the non-empty ranges, for metadata."""
        return {str(p): [s, e] for p, (s, e) in sorted(self.delta.ranges.items()) if e > s}

    def read(self) -> Iterator[tuple[RawMessage, list[Record] | DecodeError]]:
        return read_delta(self.bootstrap, self.ledger, self.source, self.delta_num,
                          self.format, consumer_config=self.consumer_config, timeout=self.timeout)


class StreamTopicIOManager(dg.ConfigurableIOManager):
    """Loads the run's deltas' slices of a Qlik, DataWorks or Datastream topic (a source asset)."""

    kafka: KafkaResource
    ledger: CdcLedgerResource

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        raise dg.Failure(description="a Kafka topic is a source asset: deltaport never writes it")

    def load_input(self, context: dg.InputContext) -> list[StreamSlice]:
        topic = context.asset_key.path[-1]
        meta = input_metadata(context)
        source, fmt = meta.get("source"), meta.get("format")
        if not source or not fmt:
            raise dg.Failure(description=f"input from topic {topic!r}: its op lacks the tags "
                                         f"'{INPUT_TAG_PREFIX}source' and '{INPUT_TAG_PREFIX}format'")
        return [self._slice(topic, source, fmt, n) for n in run_deltas(context)]

    def _slice(self, topic: str, source: str, fmt: str, n: int) -> StreamSlice:
        ledger = self.ledger.get()
        try:
            delta = ledger.delta(source, n)
        except LedgerError as exc:
            raise dg.Failure(description=f"delta {n} of source {source!r} is not sealed in {self.ledger.url} "
                                         f"(has its sensor sealed it?): {exc}",
                             metadata={"topic": topic, "delta": n}) from exc
        if delta.topic != topic:
            raise dg.Failure(description=f"delta {n} of source {source!r} was sealed on topic {delta.topic!r}, "
                                         f"not {topic!r}: the source's topic changed in the config")
        return StreamSlice(source, fmt, delta, ledger, self.kafka.bootstrap(), self.kafka.client_config(),
                           self.kafka.timeout_seconds)
