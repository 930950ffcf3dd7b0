"""What the Dagster UI's first views cost over a deployment's lifetime of deltas (issue 43).

A deployment with the partition window (`sensor.partition_window`, platform_assets/retirement.py)
holds, at N deltas, the partitions, runs and events of its last W deltas only: retirement deletes
the rest as it goes (its passes are measured by bench/partitions_bench.py, which ages an instance
without the window and then retires it; at 30,000 deltas it left the figures of a 1,000-delta
instance). So the instance of a windowed deployment at N deltas is aged here directly: partitions
N-W..N-1, a run per delta and each delta's five materializations and check evaluation (copied
in batches from a real run's rows, partitions_bench.age), the landed and retired marks at N-1 and
N-W-1. With `--without-window` the same size is also aged without it: every delta in Dagster, as
issue 43 measured it (4.5 s at 100,000, 11.1 s at 300,000).

On each instance, a real `dagster-webserver` (its own process, as deployed; on PostgreSQL it
holds a pooled connection, as the webserver does) answers the UI's own GraphQL queries, copied
from dagster-webserver 1.13.27's bundle:
- `AssetGraphLiveQuery`: the lineage and catalog views' live data (every asset of the code
  location: latest materialization and observation, checks, partition stats);
- `PartitionHealthQuery` of `<dm>/snapshot`: its partitions page (every partition key and its
  status).
Each first after a new delta (a partition added, as the sensor adds it: a dynamic partitions
definition's identity is a hash of its keys, so every asset's cached status is thrown away) and
warm; medians of `--repeat`. Also the sensor's Dagster calls on an idle tick (partitions_bench's),
unless `--no-sync`, a whole `deltaport sync` with nothing to do (a real Kafka broker, the source's
topics empty, every delta landed), and the instance's size. Ratios are largest size over smallest, in one process; never asserted.

    python bench/partitions_ui_bench.py [--sizes 1000,100000,300000] [--window 2000]
                                        [--without-window] [--postgres] [--repeat 3] [--no-sync]

Result: bench-results/partitions-ui.json (partitions-ui-postgres.json with `--postgres`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "ui"))

from bench.partitions_bench import DM, Tables, _timed, age, idle_tick, on_postgres  # noqa: E402

# The UI's queries (dagster-webserver 1.13.27, webapp/build chunk 2093: AssetGraphLiveQuery with
# its fragments, PartitionHealthQuery), verbatim but for whitespace.
LIVE_QUERY = """
query AssetGraphLiveQuery($assetKeys: [AssetKeyInput!]!) {
  assetNodes(assetKeys: $assetKeys, loadMaterializations: true) { id ...AssetNodeLiveFragment }
  assetsLatestInfo(assetKeys: $assetKeys) { id ...AssetLatestInfoFragment }
}
fragment AssetLatestInfoFragment on AssetLatestInfo {
  id assetKey { path } unstartedRunIds inProgressRunIds latestRun { id ...AssetLatestInfoRun }
}
fragment AssetLatestInfoRun on Run { status startTime endTime id }
fragment AssetNodeLiveFragment on AssetNode {
  id opNames repository { id } assetKey { path }
  assetMaterializations(limit: 1) { ...AssetNodeLiveMaterialization }
  assetObservations(limit: 1) { ...AssetNodeLiveObservation }
  assetChecksOrError { ... on AssetChecks { checks { ...AssetCheckLiveFragment } } }
  partitionStats { numMaterialized numMaterializing numPartitions numFailed }
}
fragment AssetNodeLiveMaterialization on MaterializationEvent { timestamp runId stepKey }
fragment AssetNodeLiveObservation on ObservationEvent { timestamp runId stepKey }
fragment AssetCheckLiveFragment on AssetCheck {
  name canExecuteIndividually
  executionForLatestMaterialization { id runId status timestamp stepKey evaluation { severity } }
  partitionDefinition { name description }
  partitionStatuses {
    ... on AssetCheckDefaultPartitionStatuses {
      succeededPartitions failedPartitions inProgressPartitions skippedPartitions executionFailedPartitions
    }
    ... on AssetCheckTimePartitionStatuses { ranges { startKey endKey status } }
    ... on AssetCheckMultiPartitionStatuses {
      primaryDimensionName
      ranges {
        primaryDimStartKey primaryDimEndKey
        secondaryDim {
          ... on AssetCheckDefaultPartitionStatuses {
            succeededPartitions failedPartitions inProgressPartitions skippedPartitions executionFailedPartitions
          }
          ... on AssetCheckTimePartitionStatuses { ranges { startKey endKey status } }
        }
      }
    }
  }
}
"""

HEALTH_QUERY = """
query PartitionHealthQuery($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      partitionKeysByDimension { name type partitionKeys }
      assetPartitionStatuses {
        ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
        ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
        ... on MultiPartitionStatuses {
          primaryDimensionName
          ranges {
            primaryDimStartKey primaryDimEndKey primaryDimStartTime primaryDimEndTime
            secondaryDim {
              ... on TimePartitionStatuses { ranges { status startTime endTime startKey endKey } }
              ... on DefaultPartitionStatuses { materializedPartitions materializingPartitions failedPartitions }
            }
          }
        }
      }
    }
  }
}
"""


def _deployment(tmp: Path, bootstrap: str | None) -> tuple[Path, Path]:
    """A workspace with deltaport's code location and a config with the one datamart the aging
    wrote; its topics (empty) on `bootstrap` when a `sync` is timed, else never read."""
    import yaml

    topics = {"signal_topic": f"{DM}.signal.{tmp.name}", "backup_topic": f"{DM}.backup.{tmp.name}"}
    if bootstrap is not None:
        from resources.kafka.admin import create_topic

        for topic in topics.values():
            create_topic(bootstrap, topic)
    config = tmp / "deltaport.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": DM, "format": "prostore", **topics}],
        "kafka": {"bootstrap_servers": bootstrap or "127.0.0.1:9"},
        "lake": {"catalog": "lake", "warehouse": str(tmp / "lake")},
        "state_dir": str(tmp / "deltaport-state"),
    }))
    workspace = tmp / "workspace.yaml"
    workspace.write_text(yaml.safe_dump({"load_from": [{"python_module": {
        "module_name": "platform_assets.definitions", "working_directory": str(ROOT),
        "location_name": "deltaport"}}]}))
    return workspace, config


def _median_of(repeat: int, fn) -> float:
    return statistics.median(fn() for _ in range(repeat))


def measure_ui(home: Path, workspace: Path, config: Path, marks, repeat: int) -> dict:
    """The UI's two queries on the instance of `home`, first after a new delta and warm."""
    import dagster as dg
    import ui_check

    from platform_assets.deltas.partitions import delta_partitions, partition_key

    tmp = config.parent
    server = ui_check.Webserver(workspace=workspace, dagster_home=home, config=config, log=tmp / "webserver.log")
    out: dict = {}
    try:
        server.wait_ready(timeout=180)
        keys = [n["assetKey"] for n in server.graphql("{ assetNodes { assetKey { path } } }")["assetNodes"]]
        snapshot = {"path": [DM, "snapshot"]}
        sizes: dict = {}

        def post(query: str, variables: dict, name: str) -> float:
            began = time.perf_counter()
            data = server.graphql(query, variables)
            took = time.perf_counter() - began
            sizes[name] = len(json.dumps(data))
            return took

        live = lambda: post(LIVE_QUERY, {"assetKeys": keys}, "live")  # noqa: E731
        health = lambda: post(HEALTH_QUERY, {"assetKey": snapshot}, "health")  # noqa: E731
        with dg.DagsterInstance.from_config(str(home)) as instance:
            landed = marks.get(DM).landed_through

            def after_new_delta(query) -> float:
                nonlocal landed
                landed += 1
                instance.add_dynamic_partitions(delta_partitions(DM).name, [partition_key(landed)])
                return query()

            live(), health()  # the caches as a live UI left them
            out["live_first_after_new_delta_s"] = _median_of(repeat, lambda: after_new_delta(live))
            out["live_warm_s"] = _median_of(repeat, live)
            out["health_first_after_new_delta_s"] = _median_of(repeat, lambda: after_new_delta(health))
            out["health_warm_s"] = _median_of(repeat, health)
            # Both views after one new delta, as a user opening the lineage and then the partitions.
            out["both_first_after_new_delta_s"] = _median_of(
                repeat, lambda: after_new_delta(lambda: live() + health()))
            snap = server.graphql(HEALTH_QUERY, {"assetKey": snapshot})["assetNodeOrError"]
            out["partitions_shown"] = len(snap["partitionKeysByDimension"][0]["partitionKeys"])
            out["assets"] = len(keys)
            marks.landed(DM, landed)
        out["live_bytes"], out["health_bytes"] = sizes["live"], sizes["health"]
    finally:
        server.stop()
    return out


def measure_sync(home: Path, config: Path, repeat: int) -> dict:
    """`deltaport sync` with nothing to do (its topics empty, every delta landed): median seconds
    after one untimed (imports, the first connections)."""
    import dagster as dg

    from platform_assets.config import load_config
    from platform_assets.sync import sync

    cfg = load_config(config)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        def once() -> float:
            began = time.perf_counter()
            result = sync(cfg, instance, echo=lambda line: None)
            if not result.ok or result.landed():
                raise RuntimeError(f"a sync with nothing to do did something: {result}")
            return time.perf_counter() - began

        once()
        return {"sync_nothing_to_do_s": _median_of(repeat, once)}


def measure_instance(home: Path, marks, pg: dict | None) -> dict:
    """The sensor's Dagster calls on an idle tick, and the instance's size."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        out = {"idle_tick_dagster_calls_s": _timed(lambda: idle_tick(instance, marks), repeat=5)}
    tables = Tables(home, pg)
    out["events_in_index"], out["runs"] = tables.count("event_logs"), tables.count("runs")
    out["instance_bytes"] = tables.size(home)
    tables.close()
    return out


def one_instance(size: int, window: int | None, args, server, bootstrap: str | None) -> dict:
    """An instance aged to `size` deltas as a deployment with `window` holds them (None: every
    delta), and its figures."""
    from platform_assets.config import load_config
    from resources.state.delta_marks import DeltaMarks
    from resources.state.store import state_store

    with tempfile.TemporaryDirectory(prefix="partitions-ui-bench-") as tmp:
        home = Path(tmp) / "dagster"
        home.mkdir()
        pg = on_postgres(home, server) if server is not None else None
        first = 0 if window is None else max(0, size - window)
        aged = age(home, size, 1, pg, first=first)
        workspace, config = _deployment(Path(tmp), bootstrap)
        marks = DeltaMarks(state_store(load_config(config).state_url("index")))
        marks.landed(DM, size - 1)
        if first:
            marks.retired(DM, first - 1)
        row = {"aged_s": round(aged, 1), "deltas_in_dagster": size - first}
        row.update(measure_instance(home, marks, pg))
        if bootstrap is not None:
            row.update(measure_sync(home, config, args.repeat))
        row.update(measure_ui(home, workspace, config, marks, args.repeat))
    label = "every delta" if window is None else f"window {window}"
    print(f"{size:>7} deltas, {label:>12}: " + ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    return row


def ratios(rows: dict) -> dict:
    """Each figure of the largest size over the smallest's (flat is 1.0)."""
    if len(rows) < 2:
        return {}
    small, big = rows[min(rows)], rows[max(rows)]
    return {k: round(big[k] / small[k], 2) for k in small
            if isinstance(small[k], (int, float)) and small[k] and k not in ("aged_s",)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,100000,300000", help="deltas of each instance, comma-separated")
    from platform_assets.config import SensorConfig

    ap.add_argument("--window", type=int, default=SensorConfig.partition_window,
                    help="sensor.partition_window (default: deltaport's)")
    ap.add_argument("--without-window", action="store_true", help="also each size with every delta in Dagster")
    ap.add_argument("--postgres", action="store_true", help="a PostgreSQL instance (a throwaway server)")
    ap.add_argument("--repeat", type=int, default=3, help="queries timed per figure (median)")
    ap.add_argument("--sync", action=argparse.BooleanOptionalAction, default=True,
                    help="also time `sync` with nothing to do (starts a Kafka broker; --no-sync: not)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    report: dict = {"window": args.window, "postgres": args.postgres, "with_window": {}, "without_window": {}}
    server = None
    if args.postgres:
        from tests.support.postgres import start_postgres

        server = start_postgres()
    try:
        with contextlib.ExitStack() as stack:
            bootstrap = None
            if args.sync:
                from resources.kafka.broker import kafka_bootstrap

                bootstrap = stack.enter_context(kafka_bootstrap())
            for size in sizes:
                report["with_window"][size] = one_instance(size, args.window, args, server, bootstrap)
                if args.without_window:
                    report["without_window"][size] = one_instance(size, None, args, server, bootstrap)
    finally:
        if server is not None:
            server.stop()
    for kind in ("with_window", "without_window"):
        report[f"ratios_{kind}"] = ratios(report[kind])
        if report[f"ratios_{kind}"]:
            print(f"ratios {max(sizes)} / {min(sizes)} deltas, {kind.replace('_', ' ')}: "
                  + ", ".join(f"{k} {v}x" for k, v in report[f"ratios_{kind}"].items()), flush=True)
    path = ROOT / "bench-results" / ("partitions-ui-postgres.json" if args.postgres else "partitions-ui.json")
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
