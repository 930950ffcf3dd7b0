"""Prostore's Kafka IO managers: load a delta's slice of a backup or signal topic as an asset input.

The topics are source assets; an asset partitioned by delta takes one as input, and the IO
manager hands it the slices of the run's deltas, in order (one for a single-delta run, several
for a range run: `run_deltas`): for a backup topic, the chosen increment's messages
(their partitions and offsets, from the delta index: O(delta), not O(topic)) plus what a reader
needs to fetch them, so Spark tasks can do the fetching; for the signal topic, the delta's
events. Loading never reads the data itself. A delta whose increment is missing or incomplete
fails the load with a `dg.Failure` that says why, per export run.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from platform_assets.io_managers.inputs import INPUT_TAG_PREFIX, input_metadata, run_deltas
from resources.prostore.chunk_check import checked_report
from resources.prostore.completeness import DeltaReport
from resources.prostore.delta_index import MessageRef
from resources.prostore.resource import DeltaIndexResource
from resources.kafka.resource import KafkaResource
from resources.prostore.snapshot_bootstrap import Bootstrap, BootstrapError, plan_bootstrap


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
    # Delta 0 of a snapshot backup: the state as of this delta, not its changes (a bootstrap).
    snapshot_state: bool = False

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


def _target(context: dg.InputContext) -> tuple[str, str, list[int]]:
    topic = context.asset_key.path[-1]
    datamart = input_metadata(context).get("datamart")
    if not datamart:
        raise dg.Failure(description=f"input from topic {topic!r}: its op lacks the tag '{INPUT_TAG_PREFIX}datamart'")
    return topic, datamart, run_deltas(context)


class BackupTopicIOManager(dg.ConfigurableIOManager):
    """Loads the run's deltas' slices of a Prostore backup topic (the topic is a source asset)."""

    kafka: KafkaResource
    index: DeltaIndexResource

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        raise dg.Failure(description="a Kafka topic is a source asset: deltaport never writes it")

    def load_input(self, context: dg.InputContext) -> list[BackupSlice]:
        topic, datamart, deltas = _target(context)
        boot = self._bootstrap(context, datamart)
        return [self._slice(boot.topic, datamart, boot.snapshot_delta(n), as_delta=n, state=n == boot.base)
                if boot is not None and boot.covers(n) else self._slice(topic, datamart, n) for n in deltas]

    def _bootstrap(self, context: dg.InputContext, datamart: str) -> Bootstrap | None:
        """The source's bootstrap (which deltas come from its snapshot topic), if it has one."""
        meta = input_metadata(context)
        if not meta.get("bootstrap_topic"):
            return None
        topic, last = meta["bootstrap_topic"], int(meta["bootstrap_last_delta"])
        try:
            boot = plan_bootstrap(topic, datamart, last, self.index.get().export_runs(topic, datamart))
        except BootstrapError as exc:
            raise dg.Failure(description=str(exc), metadata={"topic": topic}) from exc
        if boot is None:
            raise dg.Failure(description=f"the snapshot of {datamart!r} in {topic!r} is not all in the index yet "
                                         "(has the sensor read it through?)", metadata={"topic": topic})
        return boot

    def _slice(self, topic: str, datamart: str, delta: int, *, as_delta: int | None = None,
               state: bool = False) -> BackupSlice:
        index = self.index.get()
        # As the sensor does before a delta is due: a chunk its changelog refuses is quarantined, a
        # hole (a run launched by hand, a backfill, reads no chunk the sensor would have refused).
        checked_report(index, topic, datamart, delta)
        report, refs = index.chosen_messages(topic, datamart, delta)
        if report is None:
            raise dg.Failure(description=f"no backup of datamart {datamart!r} delta {delta} in topic {topic!r} "
                                         "(has the sensor indexed it?)",
                             metadata={"topic": topic, "delta": delta})
        if report.chosen is None:
            why = "; ".join(f"{i.increment_id}: {', '.join(i.reasons)}" for i in report.increments)
            raise dg.Failure(description=f"datamart {datamart!r} delta {delta}: no complete increment in topic "
                                         f"{topic!r} ({why})", metadata={"topic": topic, "delta": delta})
        return BackupSlice(topic, datamart, delta if as_delta is None else as_delta, report, tuple(refs),
                           self.kafka.bootstrap(), self.kafka.client_config(), self.kafka.timeout_seconds, state)


class SignalTopicIOManager(dg.ConfigurableIOManager):
    """Loads the run's deltas' events of a Prostore signal topic, as landed in the delta index."""

    index: DeltaIndexResource

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        raise dg.Failure(description="a Kafka topic is a source asset: deltaport never writes it")

    def load_input(self, context: dg.InputContext) -> list[SignalSlice]:
        topic, datamart, deltas = _target(context)
        index = self.index.get()
        return [SignalSlice(topic, datamart, n, tuple(index.signal_events(datamart, n))) for n in deltas]
