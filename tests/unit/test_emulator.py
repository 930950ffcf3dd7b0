"""The emulator against the codecs and the completeness rules, with no broker.

Replaying the emulated backup messages with the plain reader in tests/support must give the
emulator's truth at every closed delta: if it does, the emulator is a usable oracle.
"""

from __future__ import annotations

import pytest

from resources.codecs.signal import DeltaCancel, DeltaClose, DeltaOpen, decode_signal
from resources.emulator.outgoing import BACKUP, SIGNAL
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario, snapshot_export
from tests.support.replay import apply_increment, chosen_increments

ALL_FAULTS = Faults(duplicate_rate=0.1, lost_chunk_deltas=(1, 2), reexport_deltas=(2,), lagging_deltas=(3,),
                    malformed=True)


def backup_messages(msgs):
    return [(m.partition, i, m.key, m.value) for i, m in enumerate(msgs) if m.role == BACKUP]


def replay_and_compare(sc, messages):
    parts, report = chosen_increments(messages)
    for dm, deltas in sc.truth.items():
        state: dict = {}
        for n in sorted(deltas):
            if (dm, n) not in parts:
                return report, (dm, n)
            state = apply_increment(state, parts[(dm, n)])
            assert state == deltas[n], f"{dm} delta {n} differs from the truth"
    return report, None


def test_same_seed_same_traffic_and_truth():
    a, b = build_scenario(EmulatorConfig(seed=7)), build_scenario(EmulatorConfig(seed=7))
    assert a.messages == b.messages and a.truth == b.truth
    assert build_scenario(EmulatorConfig(seed=8)).messages != a.messages


@pytest.mark.parametrize("cfg", [
    EmulatorConfig(seed=1),
    EmulatorConfig(seed=2, streams=3, chunk_size=4, backup_partitions=2, numbering="table", codec="deflate"),
    EmulatorConfig(seed=3, streams=2, chunk_size=3, logical_types=False, codec="snappy"),
], ids=["defaults", "3-streams-per-table-numbering-deflate", "plain-avro-snappy"])
def test_replaying_the_backups_gives_the_truth_at_every_delta(cfg):
    sc = build_scenario(cfg)
    report, missing = replay_and_compare(sc, backup_messages(sc.messages))
    assert missing is None
    for dm in cfg.datamarts:
        assert report.datamarts[dm].complete == sorted(sc.truth[dm])
        assert report.datamarts[dm].missing_deltas == []


def test_every_type_and_null_and_non_ascii_is_emulated():
    sc = build_scenario(EmulatorConfig(seed=5, deltas=6, rows_per_delta=30))
    rows = [r for state in sc.truth["sourcedb"].values() for r in state["table1_adqm"].values()]
    columns = {c for r in rows for c in r}
    assert {"boolean_col", "int32_col", "float_col", "uuid_col", "link_col", "date_col", "time_col", "timestamp_col"} <= columns
    for col in columns - {"id"}:
        assert any(r[col] is None for r in rows), f"{col} is never null"
        assert any(r[col] is not None for r in rows), f"{col} is always null"
    texts = [r["description"] for s in sc.truth["marketing"].values() for r in s["sales"].values() if r["description"]]
    assert any(not t.isascii() for t in texts)


def test_signal_story_is_consistent_with_the_truth():
    sc = build_scenario(EmulatorConfig(seed=11, deltas=10, cancel_rate=0.4))
    events = [decode_signal(m.key, m.value) for m in sc.messages if m.role == SIGNAL]
    for dm in sc.truth:
        mine = [e.value for e in events if e.datamart == dm]
        closed = [v.delta_num for v in mine if isinstance(v, DeltaClose)]
        assert closed == sorted(sc.truth[dm]) == list(range(10))
        cancelled = [v.delta_num for v in mine if isinstance(v, DeltaCancel)]
        assert cancelled == sc.cancelled[dm] and cancelled, "no delta was cancelled"
        # a cancelled delta's number is opened again: Prostore numbers only committed deltas
        opened = [v.delta_num for v in mine if isinstance(v, DeltaOpen)]
        assert len(opened) == len(closed) + len(cancelled)


def test_faults_are_injected_and_found_by_the_completeness_rules():
    sc = build_scenario(EmulatorConfig(seed=3, deltas=6, streams=2, chunk_size=4, faults=ALL_FAULTS))
    assert {"duplicate", "lost_chunk", "reexport", "lagging", "malformed"} <= set(sc.injected)
    report, first_missing = replay_and_compare(sc, backup_messages(sc.messages))
    for dm in sc.config.datamarts:
        r = report.datamarts[dm]
        assert r.incomplete == [1], "delta 1 lost a chunk and was never re-exported"
        assert first_missing == (sc.config.datamarts[0], 1)
        delta2 = r.deltas[2]
        assert len(delta2.increments) == 2 and delta2.complete, "delta 2: a broken export, then a good one"
        assert delta2.chosen == [i for i in delta2.increments if i.complete][0].increment_id
        assert r.deltas[3].complete, "a lagging backup arrives in the end"


def test_lagging_backup_comes_after_later_deltas_close():
    sc = build_scenario(EmulatorConfig(seed=4, deltas=6, faults=Faults(lagging_deltas=(2,), lag=2)))
    notes = [m.note for m in sc.messages]
    first_backup_of_2 = next(i for i, n in enumerate(notes) if n.startswith("marketing:2:"))
    first_backup_of_3 = next(i for i, n in enumerate(notes) if n.startswith("marketing:3:"))
    assert first_backup_of_3 < first_backup_of_2


def test_snapshot_backup_starts_at_delta_zero_with_the_full_state():
    sc = build_scenario(EmulatorConfig(seed=9, deltas=5))
    msgs, mapping = snapshot_export(sc, "marketing", depth=2)
    assert mapping == {0: 2, 1: 3, 2: 4}
    parts, _ = chosen_increments([(m.partition, i, m.key, m.value) for i, m in enumerate(msgs)])
    state: dict = {}
    for snap_delta, src in sorted(mapping.items()):
        state = apply_increment(state, parts[("marketing", snap_delta)])
        # The snapshot ships the changelog as of the export, so tables created after delta
        # `src` exist in it, empty: the rows are what must match.
        assert {t: r for t, r in state.items() if r} == {t: r for t, r in sc.truth["marketing"][src].items() if r}


def test_malformed_faults_are_deterministic_too():
    cfg = EmulatorConfig(seed=7, deltas=4, faults=ALL_FAULTS)
    assert build_scenario(cfg).messages == build_scenario(cfg).messages


def test_number_gap_numbers_later_deltas_higher_and_tells_the_same_story():
    """A lake aged by a generator (bench/age_bench.py) takes the story's later deltas under
    numbers that leave room for the generated ones; the story itself is unchanged."""
    plain = build_scenario(EmulatorConfig(seed=5, deltas=5, datamarts=("marketing",), cancel_rate=0.0))
    gapped = build_scenario(EmulatorConfig(seed=5, deltas=5, datamarts=("marketing",), cancel_rate=0.0,
                                           number_gap=(3, 1000)))
    assert sorted(gapped.truth["marketing"]) == [0, 1, 2, 1003, 1004]
    for n in range(5):
        assert gapped.truth["marketing"][gapped.config.number(n)] == plain.truth["marketing"][n]
    closed = [decode_signal(m.key, m.value).value.delta_num for m in gapped.messages if m.role == SIGNAL
              and isinstance(decode_signal(m.key, m.value).value, DeltaClose)]
    assert closed == [0, 1, 2, 1003, 1004]
