"""Which snapshots a maintenance pass would expire (resources/lake/maintenance_states.py): pure
logic over a table's snapshots and refs. Against real Iceberg tables:
tests/integration/test_maintenance.py."""

from __future__ import annotations

from resources.lake.maintenance_states import TableState


def test_only_old_snapshots_no_ref_names_are_expirable():
    state = TableState("c.ns.t", old_snapshots={1, 2, 3}, refs={"main": 3, "delta_1": 1})
    assert state.expirable() == {2}


def test_a_dropped_tags_snapshot_becomes_expirable_unless_another_ref_names_it():
    state = TableState("c.ns.t", tags={1: 1, 2: 2}, old_snapshots={1, 2, 3},
                       refs={"main": 3, "delta_1": 1, "delta_2": 2, "audit": 2})
    assert state.expirable([1]) == {1}
    assert state.expirable([1, 2]) == {1}  # the branch "audit" still names 2


def test_new_snapshots_are_never_expirable():
    state = TableState("c.ns.t", old_snapshots=set(), refs={"main": 9})
    assert state.expirable([5]) == set()
