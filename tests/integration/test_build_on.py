"""A user's own asset on deltaport (`code:` in deltaport.yaml, `@delta_asset`): it lands with every
delta through the sensor path (`sync`), single-delta and range runs alike, and equals the
emulator's truth as of every delta.

Real broker, real Spark, real Iceberg. The user module is written to the config's folder, as a
team would keep it beside its deltaport.yaml; the asset is the demo's own
(platform_assets/examples/marketing_marts.py), re-exported from there.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import dagster as dg
import pytest
import yaml

from platform_assets.cli import main
from platform_assets.config import ConfigError, load_config, parse_config
from platform_assets.definitions import build_definitions
from platform_assets.sync import sync
from resources.emulator.outgoing import BACKUP
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario
from resources.kafka.admin import create_topic
from resources.kafka.publish import publish
from tests.support.read_engines import read_with_both_engines

pytestmark = pytest.mark.integration

DM = "marketing"
HELD = 3  # the delta whose backup arrives in the second sync


def _config(topic: str, bootstrap: str, tmp_path, catalog: str, module: str, *, per_run: int) -> dict:
    """A backup-only datamart on `topic`, its lake and state under `tmp_path`, the user `module`."""
    return {"sources": [{"name": DM, "format": "prostore", "backup_topic": topic}],
            "kafka": {"bootstrap_servers": bootstrap},
            "lake": {"catalog": catalog, "warehouse": str(tmp_path / "lake")},
            "state_dir": str(tmp_path / "state"), "sensor": {"max_deltas_per_run": per_run}, "code": [module]}


def _truth(sc, n) -> dict[int, int]:
    units: dict[int, int] = defaultdict(int)
    for row in sc.truth[DM][n].get("sales", {}).values():
        units[row["store_id"]] += row["product_units"]
    return dict(units)


def test_a_user_asset_lands_with_every_delta_and_equals_the_truth(spark_remote, kafka_bootstrap, tmp_path, capsys):
    sc = build_scenario(EmulatorConfig(seed=31, deltas=5, datamarts=(DM,), streams=1, chunk_size=8,
                                       backup_partitions=1, faults=Faults(duplicate_rate=0.0)))
    backups = [m for m in sc.messages if m.role == BACKUP]
    held = [m for m in backups if m.note.startswith(f"{DM}:{HELD}:")]
    topic = f"build-on.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in backups if m not in held], kafka_bootstrap, {BACKUP: topic})

    module = f"team_marts_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(
        "from platform_assets.examples.marketing_marts import sales_by_store  # noqa: F401\n")
    config = tmp_path / "deltaport.yaml"
    # range runs (0-1, 3-4) and a single-delta run (2)
    config.write_text(yaml.safe_dump(_config(topic, kafka_bootstrap, tmp_path, "build_on", module, per_run=2)))
    cfg = load_config(str(config))
    defs = build_definitions(cfg)
    mart = dg.AssetKey([DM, "sales_by_store"])
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey([DM, "snapshot"]) in graph.get(mart).parent_keys  # lineage: snapshot -> mart
    assert mart in defs.resolve_job_def(f"{DM}_delta_job").asset_layer.selected_asset_keys

    spark = defs.resources["spark"].get_session()

    def check(deltas):
        rows = spark.table("build_on.marketing_marts.sales_by_store").collect()
        for n in deltas:
            got = {r["store_id"]: r["product_amount"] for r in rows if r["delta_num"] == n}
            assert got == _truth(sc, n), f"sales_by_store as of delta {n}"

    with dg.instance_for_test() as instance:
        first = sync(cfg, instance, echo=lambda line: None)
        assert first.ok and first.landed() == [(DM, n) for n in range(HELD)]
        check(range(HELD))
        publish(held, kafka_bootstrap, {BACKUP: topic})
        second = sync(cfg, instance, echo=lambda line: None)
        assert second.ok and second.landed() == [(DM, n) for n in range(HELD, 5)]
        check(range(5))
        mats = instance.fetch_materializations(mart, limit=100).records
        assert {m.partition_key for m in mats} == {f"{n:08d}" for n in range(5)}
        # The mart's rows after each run, on the run's last delta (the catalog's row-count plot).
        counted = {m.partition_key: m.asset_materialization.metadata["dagster/row_count"].value
                   for m in mats if "dagster/row_count" in m.asset_materialization.metadata}
        assert set(counted) == {f"{n:08d}" for n in (1, 2, 4)}  # runs 0-1, 2, 3-4
        assert counted[f"{4:08d}"] == spark.table("build_on.marketing_marts.sales_by_store").count()
    _read_the_mart(sc, config, capsys)


def _mart_text(sc, n: int) -> str:
    rows = sorted(_truth(sc, n).items(), key=lambda kv: repr(kv[0]))
    return "".join(json.dumps({"store_id": s, "product_amount": a}) + "\n" for s, a in rows)


def _read_the_mart(sc, config, capsys) -> None:
    """`deltaport read` of the mart, as of its last landed delta and as of each delta, by both
    names, with both engines (the same text), in both formats; an unknown mart names the known."""
    name = f"{DM}_marts.sales_by_store"
    assert read_with_both_engines(config, name, [], capsys) == _mart_text(sc, 4)
    for n in range(5):
        assert read_with_both_engines(config, f"{DM}/sales_by_store", ["--as-of-delta", str(n)], capsys) == _mart_text(sc, n)
    csv = read_with_both_engines(config, name, ["--as-of-delta", "2", "--format", "csv"], capsys)
    assert csv.splitlines()[0] == "store_id,product_amount" and len(csv.splitlines()) == len(_truth(sc, 2)) + 1
    capsys.readouterr()
    assert main(["read", name, "--config", str(config)]) == 0
    assert f"# {name} as of delta 4, the last delta landed in it" in capsys.readouterr().err
    for engine in ("spark", "pyiceberg"):
        assert main(["read", f"{DM}_marts.nope", "--config", str(config), "--engine", engine]) == 2
        assert f"the marts of {DM} (`code:` in {config}): {name}" in capsys.readouterr().err
        assert main(["read", name, "--as-of-delta", "9", "--config", str(config), "--engine", engine]) == 2
        assert "delta 9 has not landed in the mart (landed: 0-4)" in capsys.readouterr().err


def test_a_user_asset_of_an_unknown_source_is_refused_naming_it(tmp_path):
    module = f"bad_marts_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(
        "from platform_assets.build_on import delta_asset\n"
        "@delta_asset(source='nowhere')\n"
        "def orphan(view):\n"
        "    return None\n")
    cfg = parse_config({"sources": [{"name": DM, "format": "prostore", "backup_topic": "t"}], "code": [module]},
                       str(tmp_path / "deltaport.yaml"))
    with pytest.raises(ConfigError, match="names source 'nowhere'"):
        build_definitions(cfg)


def test_a_failing_user_asset_is_named_beside_the_deltas_that_landed(spark_remote, kafka_bootstrap, tmp_path):
    """A user asset that raises fails its run after the snapshot landed: the outcome's line says the
    deltas landed with the snapshot and the other assets, names the failed asset with its error,
    and says the next sync runs the deltas again, which it does; the last line counts the same."""
    sc = build_scenario(EmulatorConfig(seed=37, deltas=3, datamarts=(DM,), streams=1, chunk_size=8,
                                       backup_partitions=1, faults=Faults(duplicate_rate=0.0)))
    topic = f"build-on-fail.{os.getpid()}"
    create_topic(kafka_bootstrap, topic)
    publish([m for m in sc.messages if m.role == BACKUP], kafka_bootstrap, {BACKUP: topic})
    module = f"broken_marts_{os.getpid()}"
    (tmp_path / f"{module}.py").write_text(
        "from platform_assets.build_on import delta_asset\n"
        "from platform_assets.examples.marketing_marts import sales_by_store  # noqa: F401\n"
        f"@delta_asset(source={DM!r})\n"
        "def open_region_units(view):\n"
        "    raise RuntimeError('no regions table in this datamart')\n")
    cfg = parse_config(_config(topic, kafka_bootstrap, tmp_path, "build_on_fail", module, per_run=3),
                       str(tmp_path / "deltaport.yaml"))
    broken = f"{DM}/open_region_units"
    with dg.instance_for_test() as instance:
        for attempt in range(2):  # the second sync runs the same deltas again
            lines: list[str] = []
            result = sync(cfg, instance, echo=lines.append)
            assert not result.ok and [o.deltas for o in result.outcomes] == [[0, 1, 2]], lines
            outcome = result.outcomes[0]
            assert outcome.snapshot_landed and f"{DM}/sales_by_store" in outcome.landed_assets
            assert set(outcome.failed_assets) == {broken}
            assert "RuntimeError: no regions table in this datamart" in outcome.failed_assets[broken]
            line = next(line for line in lines if line.startswith(f"{DM} deltas 0-2: "))
            assert line.startswith(f"{DM} deltas 0-2: snapshot, {DM}/sales_by_store landed (sales +"), line
            assert f"; {broken} FAILED: RuntimeError: no regions table in this datamart" in line, line
            assert line.endswith("; the next sync runs deltas 0-2 again"), line
            assert result.summary() == (f"sync: 3 delta(s) landed in 1 run(s), 0 failed; on 3 of the landed deltas "
                                        f"{broken} failed: the next sync runs those deltas again")
        spark = dg.Definitions.merge(build_definitions(cfg)).resources["spark"].get_session()
        rows = spark.table("build_on_fail.marketing_marts.sales_by_store").collect()
        got = {r["store_id"]: r["product_amount"] for r in rows if r["delta_num"] == 2}
        assert got == _truth(sc, 2)  # the deltas and the good asset landed, equal to the truth
