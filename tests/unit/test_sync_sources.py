"""`deltaport sync --source NAME` lands the named sources only, and a run's line names the tables
it changed with a count of the others (issue 57, item 4). No broker: the per-source pass is
recorded instead of run."""

from __future__ import annotations

import dagster as dg
import pytest

from platform_assets import sync as sync_module
from platform_assets.cli import main
from platform_assets.config import parse_config
from platform_assets.sync import DeltaOutcome, UnknownSourceError, render, sync


def config(tmp_path):
    return parse_config({
        "sources": [*({"name": n, "format": "prostore", "signal_topic": f"{n}.signal", "backup_topic": f"{n}.backup"}
                      for n in ("a", "b")), {"name": "c", "format": "qlik", "topic": "c.changes"}],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},
        "lake": {"catalog": "lake", "warehouse": str(tmp_path / "lake")},
        "state_dir": str(tmp_path / "state"),
    })


@pytest.fixture
def passes(monkeypatch):
    """The sources whose pass `sync` starts, in order."""
    done: list[str] = []
    monkeypatch.setattr(sync_module, "_sync_source", lambda instance, defs, name, *args, **kwargs: done.append(name))
    return done


def test_only_the_named_sources_are_synced(tmp_path, passes):
    cfg = config(tmp_path)
    with dg.instance_for_test() as instance:
        sync(cfg, instance, sources=["c", "a"], echo=lambda _: None)
        assert passes == ["a", "c"]  # in the config's order
        passes.clear()
        sync(cfg, instance, echo=lambda _: None)
        assert passes == ["a", "b", "c"]


def test_an_unknown_source_is_refused_before_anything_runs(tmp_path, passes):
    with dg.instance_for_test() as instance, pytest.raises(UnknownSourceError, match="'nope'.*sources: a, b, c"):
        sync(config(tmp_path), instance, sources=["a", "nope"])
    assert passes == []


def test_the_command_takes_repeated_sources(tmp_path, monkeypatch, capsys):
    seen = {}

    def recording(cfg, instance, **kwargs):
        seen.update(kwargs)
        return sync_module.SyncResult()

    monkeypatch.setattr(sync_module, "sync", recording)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    cfg = tmp_path / "deltaport.yaml"
    cfg.write_text(f"datamarts:\n  - {{name: a, signal_topic: s, backup_topic: b}}\n  - {{name: b, signal_topic: s2, "
                   f"backup_topic: b2}}\nlake: {{warehouse: {tmp_path / 'lake'}}}\nstate_dir: {tmp_path / 'state'}\n")
    assert main(["sync", "--config", str(cfg), "--source", "b", "--source", "a"]) == 0
    assert seen["sources"] == ["b", "a"]


def test_a_runs_line_names_the_changed_tables_and_counts_the_others():
    wide = DeltaOutcome("dm", [7], True, rows={"t1": 5, "t2": 3, **{f"u{i}": 0 for i in range(98)}},
                        snapshot_rows={"t1": 50, "t2": 30})
    assert render(wide) == "dm delta 7: landed (t1 +5 -> 50, t2 +3 -> 30, 98 other tables unchanged)"
    one = DeltaOutcome("dm", [7, 8], True, rows={"t1": 5, "u": 0}, snapshot_rows={"t1": 50, "u": 4})
    assert render(one) == "dm deltas 7-8: landed (t1 +5 -> 50, 1 other table unchanged)"
    alone = DeltaOutcome("dm", [7], True, snapshot_rows={"t1": 50})  # the snapshot run alone: no increment rows
    assert render(alone) == "dm delta 7: landed (t1 +0 -> 50)"
    quiet = DeltaOutcome("dm", [7], True, rows={"u": 0})
    assert render(quiet) == "dm delta 7: landed (1 other table unchanged)"


def test_a_range_runs_rows_are_each_deltas_summed_and_the_snapshots_of_its_last_delta():
    """A range run materializes each partition with its own delta's metadata, in no set order
    (the order once made sync's line show one delta's rows as the run's)."""
    from types import SimpleNamespace

    import dagster as dg

    from platform_assets.sync import _rows

    def event(key, partition, **rows):
        mat = dg.AssetMaterialization(key, partition=partition, metadata={f"rows/{t}": n for t, n in rows.items()})
        return SimpleNamespace(event_specific_data=SimpleNamespace(materialization=mat))

    inc, snap = dg.AssetKey(["dm", "increment"]), dg.AssetKey(["dm", "snapshot"])
    events = [event(inc, "2", stores=25), event(snap, "1"), event(inc, "0", sales=7, stores=1),
              event(snap, "2", sales=40, stores=26), event(inc, "1", sales=3), event(snap, "0")]
    run = SimpleNamespace(get_asset_materialization_events=lambda: events)
    assert _rows(run, inc, per_delta=True) == {"sales": 10, "stores": 26}
    assert _rows(run, snap, per_delta=False) == {"sales": 40, "stores": 26}
    assert _rows(run, dg.AssetKey(["dm", "changelog"]), per_delta=True) == {}
