"""Kafka IO managers: load a delta's slice of a topic as an asset input.

The topics are source assets; an asset partitioned by delta takes one as input, and the IO
manager hands it the slice of delta N: for a backup topic, the chosen increment's messages
(their partitions and offsets, from the delta index: O(delta), not O(topic)) plus what a reader
needs to fetch them, so Spark tasks can do the fetching; for the signal topic, the delta's
events. Loading never reads the data itself. A delta whose increment is missing or incomplete
fails the load with a `dg.Failure` that says why, per export run.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from resources.completeness import DeltaReport
from resources.delta_index import MessageRef
from resources.index_resource import DeltaIndexResource
from resources.kafka.resource import KafkaResource


@dataclass(frozen=True)
class BackupSlice:
    """Delta N of one datamart in a backup topic: where its chosen increment's messages are."""

    topic: str
    datamart: str
    delta_num: int
    report: DeltaReport
    refs: tuple[MessageRef, ...]
    bootstrap: str
    consumer_config: dict
    timeout: float

    @property
    def value_bytes(self) -> int:
        return sum(r.value_bytes for r in self.refs)

    def table_refs(self, table: str) -> list[MessageRef]:
        return [r for r in self.refs if r.table_name == table]

    def changelog_refs(self) -> list[MessageRef]:
        return [r for r in self.refs if r.table_name is None]

    def offsets(self) -> dict[int, list[int]]:
        """{partition: [first, last]} of the chosen increment, for metadata."""
        out: dict[int, list[int]] = {}
        for r in self.refs:
            lo, hi = out.get(r.partition, [r.offset, r.offset])
            out[r.partition] = [min(lo, r.offset), max(hi, r.offset)]
        return out


@dataclass(frozen=True)
class SignalSlice:
    topic: str
    datamart: str
    delta_num: int
    events: tuple[dict, ...]  # as stored by the delta index, arrival order


def _target(context: dg.InputContext) -> tuple[str, str, int]:
    topic = context.asset_key.path[-1]
    datamart = (context.definition_metadata or {}).get("datamart")
    if not datamart:
        raise dg.Failure(description=f"input from topic {topic!r} lacks the 'datamart' metadata of its AssetIn")
    return topic, datamart, int(context.partition_key)


class BackupTopicIOManager(dg.ConfigurableIOManager):
    """Loads delta N's slice of a Prostore backup topic (the topic is a source asset)."""

    kafka: KafkaResource
    index: DeltaIndexResource

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        raise dg.Failure(description="a Kafka topic is a source asset: deltaport never writes it")

    def load_input(self, context: dg.InputContext) -> BackupSlice:
        topic, datamart, delta = _target(context)
        report, refs = self.index.get().chosen_messages(topic, datamart, delta)
        if report is None:
            raise dg.Failure(description=f"no backup of datamart {datamart!r} delta {delta} in topic {topic!r} "
                                         "(has the sensor indexed it?)",
                             metadata={"topic": topic, "delta": delta})
        if report.chosen is None:
            why = "; ".join(f"{i.increment_id}: {', '.join(i.reasons)}" for i in report.increments)
            raise dg.Failure(description=f"datamart {datamart!r} delta {delta}: no complete increment in topic "
                                         f"{topic!r} ({why})", metadata={"topic": topic, "delta": delta})
        return BackupSlice(topic, datamart, delta, report, tuple(refs), self.kafka.bootstrap(),
                           self.kafka.client_config(), self.kafka.timeout_seconds)


class SignalTopicIOManager(dg.ConfigurableIOManager):
    """Loads delta N's events of a Prostore signal topic, as landed in the delta index."""

    index: DeltaIndexResource

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        raise dg.Failure(description="a Kafka topic is a source asset: deltaport never writes it")

    def load_input(self, context: dg.InputContext) -> SignalSlice:
        topic, datamart, delta = _target(context)
        return SignalSlice(topic, datamart, delta, tuple(self.index.get().signal_events(datamart, delta)))
