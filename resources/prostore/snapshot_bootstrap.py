"""Bootstrap a datamart from a snapshot backup: which source delta each snapshot delta is.

What flows through: what the delta index knows of a snapshot topic (the snapshot's deltas and
the export runs, incrementIds, of each) and the source delta the snapshot's last delta
corresponds to (`bootstrap: {topic, last_delta: M}` in the config; the snapshot's own numbers
and dates do not match the source, seed 001 line 74) become a `Bootstrap`: depth D (the
snapshot's greatest delta), base B = M - D, and the mapping source delta n in B..M <-> snapshot
delta n - B. Delta 0 holds the state as of B (seed 001 line 75), so B lands as the lake's first
delta and the deltas B+1..M are the snapshot's history; the live increments go on from M + 1.

Guarantees: a snapshot topic is used only when it holds exactly one snapshot of the datamart:
deltas 0..D without a gap, each written by one export run, and the same depth the source was
bootstrapped with (`BootstrapError` otherwise, never a merge: seed 001 line 160, "a topic with
several snapshots is not restorable reliably"); B < 0 (a mapping that puts the snapshot before
delta 0) is refused. A snapshot still arriving (a gap, an incomplete delta) is "not yet", not
an error. When the live topic also holds source delta M, the snapshot's delta D must have the
same row changes per table (`check_against_live`), else last_delta is wrong and is refused.
Pure logic: no Kafka, Spark or Dagster here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from resources.errors import DeltaportError


class BootstrapError(DeltaportError):
    """A snapshot topic that cannot bootstrap the source as configured."""


@dataclass(frozen=True)
class Bootstrap:
    topic: str
    last_delta: int  # M: the source delta the snapshot's last delta is
    depth: int  # D: the snapshot's greatest delta

    @property
    def base(self) -> int:
        """B = M - D: the source delta whose state the snapshot's delta 0 holds."""
        return self.last_delta - self.depth

    def covers(self, delta: int) -> bool:
        return self.base <= delta <= self.last_delta

    def snapshot_delta(self, delta: int) -> int:
        """The snapshot's number of source delta `delta` (B..M)."""
        if not self.covers(delta):
            raise ValueError(f"source delta {delta} is outside the snapshot's {self.base}..{self.last_delta}")
        return delta - self.base


def check_against_live(boot: Bootstrap, datamart: str, live_topic: str, snapshot_rows: Mapping[str, int],
                       live_rows: Mapping[str, int]) -> None:
    """Refuse a mapping that contradicts the live deltas: the snapshot's last delta D (an
    increment, when D > 0) must hold the same row changes per table as the live increment of
    source delta M. `*_rows`: {table: rows} of each chosen increment."""
    mine = {t: n for t, n in snapshot_rows.items() if n}
    theirs = {t: n for t, n in live_rows.items() if n}
    if mine != theirs:
        raise BootstrapError(
            f"bootstrap of {datamart!r}: snapshot delta {boot.depth} in {boot.topic!r} holds rows {mine}, but the live "
            f"increment of delta {boot.last_delta} in {live_topic!r} holds {theirs}: last_delta {boot.last_delta} is "
            "not the source delta of the snapshot's last delta")


def plan_bootstrap(topic: str, datamart: str, last_delta: int, exports: Mapping[int, Sequence[str]],
                   *, known_depth: int | None = None) -> Bootstrap | None:
    """The bootstrap of `datamart` from `topic`, given {snapshot delta: incrementIds seen}, or
    None while the snapshot is not all there yet (no delta 0, or a gap below its greatest delta).

    `known_depth`: the depth the source was bootstrapped with (from the sensor's cursor); a
    topic that has grown since holds a second snapshot and is refused.
    """
    if not exports:
        return None
    deltas = sorted(exports)
    depth = deltas[-1]
    several = {n: sorted(set(ids)) for n, ids in exports.items() if len(set(ids)) > 1}
    if several:
        n = min(several)
        raise BootstrapError(
            f"snapshot topic {topic!r} holds more than one snapshot of {datamart!r}: delta {n} was written by "
            f"export runs {', '.join(several[n])}; a snapshot goes to a topic of its own (seed 001: a topic with "
            "several snapshots is not restorable reliably), so deltaport will not merge them")
    if known_depth is not None and depth != known_depth:
        raise BootstrapError(
            f"snapshot topic {topic!r} of {datamart!r} now ends at delta {depth}, but the source was bootstrapped "
            f"from it at depth {known_depth}: a second snapshot was written to the topic; deltaport will not merge it")
    if deltas[0] != 0 or len(deltas) != depth + 1:  # not 0..depth (never listed: depth is a key's claim)
        return None  # still arriving
    if last_delta - depth < 0:
        raise BootstrapError(
            f"bootstrap of {datamart!r}: last_delta {last_delta} with a snapshot of depth {depth} in {topic!r} "
            f"would put the snapshot's state before delta 0 (at {last_delta - depth}); check last_delta")
    return Bootstrap(topic, last_delta, depth)
