"""What is Dagster's and what is ours in a steady delta: the platform against a Dagster peer
and Dagster's floor, all run the way `sync` runs ours (issue 57, item 6).

One emulated Prostore datamart (the traffic of bench/dagster_bench.py), one Dagster instance,
one warm Spark Connect server. Each delta's signal events and increment are published to Kafka,
then landed three ways, each through `sync`'s own loop (platform_assets/sync.py: a sensor tick,
its dynamic partitions and run requests, each run `execute_in_process` on the instance with
sync's tags and quiet logging, then the idle tick that ends the pass, the cursor in the state
store):
- ours: `sync` of the datamart (sensor reads Kafka, the run lands signal events, changelog,
  increment, snapshot and their checks);
- the peer: one asset partitioned by delta (the same dynamic partitions definition) whose body is
  the Spark+Iceberg script's work for that delta (bench/iceberg_script.py: per table, an
  increment append, a MERGE into the snapshot and a tag), on the same warm engine; its sensor
  requests the published deltas, their tables' offsets known from the publishing (as a user's
  committed offsets would give them: `published_ranges`), not from deltaport's index;
- the floor: our datamart's asset graph (the same multi-asset keys, checks, partitions definition,
  pool and backfill policy) whose body only yields the materializations and check results, with
  a sensor that only answers the way ours does (`delta_runs`): what Dagster costs around a step.

Per steady delta (median over the deltas with rows after the first, which creates the peer's
tables): the three times, ours - floor (what is ours), peer - floor (the script's work inside
Dagster), ours / peer, each pass's seconds outside its step (Dagster's step stats: ticks, run
creation, events, cursor); and the lake files each writes (data, manifests, metadata.json, i.e. catalog commits). The three go in a
rotating order, delta by delta, so a busy machine weighs on all alike. Ours is compared with the
emulator's truth every delta, the peer's row counts too (a benchmark of wrong results is void).

    python bench/dagster_peer_bench.py [--deltas 6] [--rows 2000]

Results: bench-results/dagster_peer.json and lines on stdout.
"""

# No `from __future__ import annotations`: Dagster reads the context parameter's annotation.
import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from bench.dagster_bench import (DM, bench_scenario, bench_setup, check, check_iceberg_script,  # noqa: E402
                                 delta_batches, step_seconds)
from bench.engine import bench_engine  # noqa: E402
from bench.results import save_results  # noqa: E402
from bench.iceberg_script import NAMESPACE as PEER_NS, iceberg_script  # noqa: E402
from bench.width_bench import lake_files  # noqa: E402
from platform_assets.definitions import resources_for  # noqa: E402
from platform_assets.deltas.partitions import delta_partitions  # noqa: E402
from platform_assets.deltas.requests import delta_runs  # noqa: E402
from platform_assets.prostore import checks  # noqa: E402
from platform_assets.prostore.delta_step import DatamartKeys  # noqa: E402
from platform_assets.sync import SyncResult, _sync_source, fail_orphaned_runs, idle_ticks_to_stop, sync  # noqa: E402
from resources.codecs.backup import MESSAGE_TYPE_DATA, decode_backup_key  # noqa: E402
from resources.emulator.outgoing import BACKUP  # noqa: E402
from resources.kafka.admin import watermarks  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402
from resources.state.cursors import SyncCursors  # noqa: E402
from resources.state.store import state_store  # noqa: E402

PEER, FLOOR = f"peer_{DM}", f"floor_{DM}"
WAYS = ("ours", "peer", "floor")


def due_sensor(source: str, job, published: list[int]) -> dg.SensorDefinition:
    """A sensor that requests the published deltas past its cursor, answering as ours does
    (`delta_runs`: partitions, one run per delta, the in-flight and retry checks) without
    reading Kafka: the sensor's part of Dagster's cost, not of ours."""
    @dg.sensor(name=f"{source}_delta_close_sensor", job=job)
    def sensor(context: dg.SensorEvaluationContext):
        nxt = json.loads(context.cursor or "{}").get("next", 0)
        due = [n for n in published if n >= nxt]
        return delta_runs(context, delta_partitions(source), source, due, "nothing published",
                          {"next": due[-1] + 1 if due else nxt, "unread": 0}, max_per_run=1)
    return sensor


def definitions(source: str, assets, published: list[int]) -> dg.Definitions:
    """`source`'s job and sensor as build_definitions names them, so sync's loop finds them."""
    job = dg.define_asset_job(f"{source}_delta_job", selection=dg.AssetSelection.groups(source))
    return dg.Definitions(assets=assets, jobs=[job], sensors=[due_sensor(source, job, published)])


def floor_assets(source: str) -> list:
    """Our datamart's multi-asset (platform_assets/prostore/assets.py) with a body that lands
    nothing: every selected asset materialized, every selected check passed."""
    keys = DatamartKeys.of(source)
    specs = [dg.AssetSpec(keys.signal_events), dg.AssetSpec(keys.changelog),
             dg.AssetSpec(keys.increment, deps=[keys.changelog]),
             dg.AssetSpec(keys.snapshot, deps=[keys.increment, keys.changelog])]
    order = [spec.key for spec in specs]  # a multi-asset yields its assets in topological order

    @dg.multi_asset(name=f"{source}_deltas", specs=specs, can_subset=True, group_name=source,
                    partitions_def=delta_partitions(source), pool=f"deltaport_{source}",
                    check_specs=[*checks.increment_check_specs(keys.increment),
                                 *checks.snapshot_check_specs(keys.snapshot)],
                    backfill_policy=dg.BackfillPolicy.multi_run(1))
    def deltas(context: dg.AssetExecutionContext):
        for key in (k for k in order if k in context.selected_asset_keys):
            yield dg.MaterializeResult(asset_key=key)
        for check_key in context.selected_asset_check_keys:
            yield dg.AssetCheckResult(asset_key=check_key.asset_key, check_name=check_key.name, passed=True)
    return [deltas]


def published_ranges(messages, high: Mapping[int, int]) -> dict[str, dict[int, tuple[int, int]]]:
    """{table: {partition: (start, end)}} of the table-data messages among `messages`, published
    in order to a topic whose partitions' next offsets were `high`: the offsets a user's script
    would have committed, known without deltaport's index (which ours fills as it lands)."""
    offsets, ranges = dict(high), {}
    for m in messages:
        if m.role != BACKUP:
            continue
        offset = offsets[m.partition]
        offsets[m.partition] += 1
        key = decode_backup_key(m.key)
        if key.message_type == MESSAGE_TYPE_DATA and key.table_name:
            lo, hi = ranges.setdefault(key.table_name, {}).get(m.partition, (offset, offset + 1))
            ranges[key.table_name][m.partition] = (min(lo, offset), max(hi, offset + 1))
    return ranges


def peer_assets(source: str, spark, bootstrap: str, topic: str, ranges: Mapping[int, dict],
                primary_keys: Mapping[str, Sequence[str]]) -> list:
    """One asset per delta partition whose body is the Spark+Iceberg script's work for it;
    `ranges` gives each published delta's offsets ({delta: `published_ranges`})."""
    @dg.asset(key=[source, "tables"], group_name=source, partitions_def=delta_partitions(source))
    def tables(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        n = int(context.partition_key)
        rows, _ = iceberg_script(spark, bootstrap, topic, DM, [(n, ranges[n])], primary_keys,
                                 namespace=f"lake.{PEER_NS}")
        return dg.MaterializeResult(metadata={"rows": rows})
    return [tables]


def sync_pass(instance: dg.DagsterInstance, defs: dg.Definitions, source: str, cursors: SyncCursors) -> SyncResult:
    """`sync`'s pass over one source (platform_assets/sync.py `sync`) on other definitions:
    its own loop, called, not copied, so peer and floor pay exactly what ours pays around a run."""
    out, sensor = SyncResult(), f"{source}_delta_close_sensor"
    with cursors.hold(source) as held:
        if not held:
            raise RuntimeError(f"{source}: the sync lock is held by someone else")
        fail_orphaned_runs(instance, source, echo=lambda line: None)
        _sync_source(instance, defs, source, sensor, cursors, out, 100, lambda line: None,
                     idle_ticks=idle_ticks_to_stop(sensor))
    return out


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-dagster-peer-bench-"))
    os.environ["DAGSTER_HOME"] = str(work / "dagster")
    (work / "dagster").mkdir()
    scenario_args = argparse.Namespace(seed=args.seed, deltas=args.deltas, rows=args.rows, backlog=0, warm_backlog=0)
    sc = bench_scenario(scenario_args)
    res: dict = {"config": vars(args) | {"out": str(args.out)}, "deltas": []}
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work) as engine:
            cfg, topics, _ = bench_setup(bootstrap, engine, work)
            layout, lake = LakeLayout("lake"), work / "lake"
            cursors = SyncCursors(state_store(cfg.state_url("index"), cfg.state_password_env))
            published: list[int] = []
            ranges: dict[int, dict] = {}
            primary_keys = {name: t.primary_key for name, t in sc.databases[DM].tables.items()}
            peer = definitions(PEER, peer_assets(PEER, engine.spark, bootstrap, topics[BACKUP], ranges, primary_keys),
                               published)
            floor = definitions(FLOOR, floor_assets(FLOOR), published)
            namespaces = {"ours": DM, "peer": PEER_NS}
            spark = resources_for(cfg)["spark"].get_session()
            with dg.DagsterInstance.get() as instance:
                ways = {"ours": lambda: sync(cfg, instance, echo=lambda line: None),
                        "peer": lambda: sync_pass(instance, peer, PEER, cursors),
                        "floor": lambda: sync_pass(instance, floor, FLOOR, cursors)}
                for i, (n, msgs) in enumerate(delta_batches(sc.messages)[:args.deltas]):
                    high = {p: hi for p, (_, hi) in watermarks(bootstrap, topics[BACKUP]).items()}
                    publish(msgs, bootstrap, topics)
                    ranges[n] = published_ranges(msgs, high)
                    published.append(n)
                    entry: dict = {"delta": n, "seconds": {}, "files": {}, "landed": {}}
                    for way in WAYS[i % 3:] + WAYS[:i % 3]:  # rotating order
                        before = lake_files(lake, namespaces[way]) if way in namespaces else None
                        t0 = time.perf_counter()
                        out = ways[way]()
                        entry["seconds"][way] = round(time.perf_counter() - t0, 3)
                        entry["landed"][way] = [d for _, d in out.landed()]
                        runs = [r.run_id for r in instance.get_runs(limit=len(out.outcomes))]
                        # the step's own seconds (Dagster's step stats); the rest of the pass is
                        # around the step: ticks, run creation, events, the cursor
                        entry.setdefault("step_seconds", {})[way] = round(sum(
                            v for k, v in step_seconds(instance, runs).items() if k.startswith("step ")), 3)
                        if way == "ours":
                            entry["rows"] = sum(sum(o.rows.values()) for o in out.outcomes)
                        if before is not None:
                            after = lake_files(lake, namespaces[way])
                            entry["files"][way] = {k: after[k] - before[k] for k in after}
                    entry["equal"] = (all(entry["landed"][w] == [n] for w in WAYS) and check(spark, layout, sc, n)
                                      and check_iceberg_script(engine.spark, sc, n, f"lake.{PEER_NS}"))
                    res["deltas"].append(entry)
                    print(f"delta {n}: seconds {entry['seconds']}, files {entry['files']}, equal {entry['equal']}",
                          flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["summary"] = summarize(res["deltas"])
    return res


def steady_deltas(deltas: list[dict]) -> list[dict]:
    """The deltas with rows after the first one with rows (which creates the peer's tables; a
    delta of DDL alone lands nothing of the peer's): a steady delta costs each way its work."""
    with_rows = [e for e in deltas if e["rows"]]
    return with_rows[1:] or with_rows or deltas


def summarize(deltas: list[dict]) -> dict:
    """Medians over the steady deltas (`steady_deltas`): seconds of each way, what is ours and
    what is the script's beyond Dagster's floor, ours against the peer, and files per delta."""
    steady = steady_deltas(deltas)
    out = {"steady_deltas": [e["delta"] for e in steady]}
    out |= {f"{w}_s": round(statistics.median(e["seconds"][w] for e in steady), 3) for w in WAYS}
    out["ours_minus_floor_s"] = round(statistics.median(e["seconds"]["ours"] - e["seconds"]["floor"] for e in steady), 3)
    out["peer_minus_floor_s"] = round(statistics.median(e["seconds"]["peer"] - e["seconds"]["floor"] for e in steady), 3)
    for w in WAYS:  # what a pass spends outside the step
        out[f"{w}_around_step_s"] = round(statistics.median(
            e["seconds"][w] - e["step_seconds"][w] for e in steady), 3)
    out["ours_over_peer"] = round(statistics.median(e["seconds"]["ours"] / e["seconds"]["peer"] for e in steady), 2)
    out["ours_over_peer_beyond_floor"] = round(out["ours_minus_floor_s"] / max(out["peer_minus_floor_s"], 1e-9), 2)
    for w in ("ours", "peer"):
        for kind in ("data", "manifests", "metadata_json"):
            out[f"{w}_files_{kind}"] = statistics.median(e["files"][w][kind] for e in steady)
        out[f"{w}_files"] = statistics.median(sum(e["files"][w].values()) for e in steady)
    out["files_ours_over_peer"] = round(out["ours_files"] / max(out["peer_files"], 1e-9), 2)
    out["all_equal"] = all(e["equal"] for e in deltas)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deltas", type=int, default=8,
                    help="deltas landed one at a time (the first ones are the emulator's DDL; the first with rows warms up)")
    ap.add_argument("--rows", type=int, default=2000, help="row changes per delta")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "dagster_peer.json")
    args = ap.parse_args(argv)
    if args.deltas < 4:
        ap.error("--deltas must be at least 4 (the emulator's first two are DDL, the first with rows creates the tables)")
    logging.basicConfig(level=logging.WARNING)
    sm = save_results(run(args), args.out)
    print(f"{report_line(sm)}\nwrote {args.out}")
    return 0 if sm["all_equal"] else 1


def report_line(sm: dict) -> str:
    return (f"steady delta (median of {len(sm['steady_deltas'])}): ours {sm['ours_s']} s, peer {sm['peer_s']} s, "
            f"floor {sm['floor_s']} s; ours - floor {sm['ours_minus_floor_s']} s, peer - floor "
            f"{sm['peer_minus_floor_s']} s; ours / peer {sm['ours_over_peer']}x "
            f"({sm['ours_over_peer_beyond_floor']}x beyond the floor); around the step ours "
            f"{sm['ours_around_step_s']} s, peer {sm['peer_around_step_s']} s, floor {sm['floor_around_step_s']} s; "
            f"files per delta ours {sm['ours_files']} "
            f"({sm['ours_files_metadata_json']} metadata.json), peer {sm['peer_files']} "
            f"({sm['peer_files_metadata_json']} metadata.json); equal {sm['all_equal']}")


if __name__ == "__main__":
    sys.exit(main())
