"""plan_bootstrap: one whole snapshot maps onto source deltas; anything else waits or is refused."""

from __future__ import annotations

import pytest

from resources.prostore.snapshot_bootstrap import Bootstrap, BootstrapError, check_against_live, plan_bootstrap


def test_a_whole_snapshot_maps_its_deltas_onto_the_source():
    boot = plan_bootstrap("snap", "dm", 7, {0: ["a"], 1: ["a"], 2: ["a"]})
    assert boot == Bootstrap("snap", 7, 2) and boot.base == 5
    assert [boot.snapshot_delta(n) for n in (5, 6, 7)] == [0, 1, 2]
    assert not boot.covers(4) and not boot.covers(8)
    with pytest.raises(ValueError):
        boot.snapshot_delta(8)


def test_a_snapshot_still_arriving_waits():
    assert plan_bootstrap("snap", "dm", 7, {}) is None
    assert plan_bootstrap("snap", "dm", 7, {0: ["a"], 2: ["a"]}) is None  # delta 1 not there yet
    assert plan_bootstrap("snap", "dm", 7, {1: ["a"]}) is None  # no delta 0 yet
    # A key claiming the greatest delta a key may (10^9) costs its own entry, not 10^9 of them.
    assert plan_bootstrap("snap", "dm", 7, {0: ["a"], 1_000_000_000: ["x"]}) is None


def test_a_second_snapshot_in_the_topic_is_refused_not_merged():
    with pytest.raises(BootstrapError, match="more than one snapshot of 'dm': delta 0 was written by export runs a, b"):
        plan_bootstrap("snap", "dm", 7, {0: ["a", "b"], 1: ["a"]})
    with pytest.raises(BootstrapError, match="now ends at delta 3, but the source was bootstrapped from it at depth 2"):
        plan_bootstrap("snap", "dm", 7, {0: ["a"], 1: ["a"], 2: ["a"], 3: ["a"]}, known_depth=2)


def test_a_mapping_before_delta_zero_is_refused():
    with pytest.raises(BootstrapError, match="last_delta 1 with a snapshot of depth 2"):
        plan_bootstrap("snap", "dm", 1, {0: ["a"], 1: ["a"], 2: ["a"]})
    assert plan_bootstrap("snap", "dm", 0, {0: ["a"]}).base == 0


def test_a_snapshot_that_contradicts_the_live_delta_is_refused():
    boot = Bootstrap("snap", 7, 2)
    check_against_live(boot, "dm", "live", {"a": 3, "b": 0}, {"a": 3})  # empty tables do not count
    with pytest.raises(BootstrapError, match="last_delta 7 is not the source delta of the snapshot's last delta"):
        check_against_live(boot, "dm", "live", {"a": 3}, {"a": 4})
