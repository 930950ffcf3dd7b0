"""What a lake's age costs (issue 30: "on a lake aged to 20,000 deltas, a steady delta and a
`deltaport read --as-of-delta N` cost <= 1.2x what they cost at delta 100; metadata file size
per table stays bounded").

One datamart, one Kafka broker, one warm Spark Connect server, one Dagster instance, in one
process (ratios in one run, never timed assertions):
1. `--warm` real deltas (about `--rows` row changes each) land through `sync` (range runs, with
   maintenance as configured: every 50 deltas, keep_tags 100, expiry as for an aged lake).
2. Age ~100: `--steady` deltas land one `sync` each, as users run it; then `deltaport read` (the CLI
   in a subprocess, as users run it, on the same server) of the datamart's biggest table as of an
   old delta (`--warm` // 2, answered by the history) and of its current state, `--repeat`
   times each; and the metadata of every table by kind.
3. The lake is aged to `--age` deltas by bench/age_lake.py (its docstring says exactly what it
   writes and how that differs from a real run); the emulator numbers its next deltas from there.
4. Age `--age`: the same measures (the old delta read is `--age` // 2, a generated delta).
Reported: seconds at both ages (median), the ratios, the metadata per table kind (newest
metadata file, manifest list, manifests: count and bytes, snapshots, refs), the aging's own
seconds; every read's rows are checked against the emulator's truth, and so is the lake at the
end (a benchmark of wrong answers is void).

    python bench/age_bench.py [--age 20000] [--warm 101] [--steady 3] [--rows 2000] [--repeat 3]

Result: bench-results/age.json and lines on stdout. `uptime` is printed before and after: on a
shared machine the ratio means little when the load changed between the two ages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from bench.age_lake import age_lake  # noqa: E402
from bench.dagster_bench import DM, check, delta_batches  # noqa: E402
from bench.engine import bench_engine  # noqa: E402
from platform_assets.config import parse_config  # noqa: E402
from platform_assets.sync import sync  # noqa: E402
from resources.emulator.outgoing import BACKUP, SIGNAL  # noqa: E402
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.lake.history_forms import AsOfDelta, history_where  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402
from resources.lake.prostore_history import history_ident  # noqa: E402

KINDS = (("snapshot", ""), ("increment", "_increment"), ("history", "_history"), ("meta", "_meta"))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def table_metadata(spark, warehouse: Path, ident: str) -> dict:
    """The table's newest metadata file, its current manifest list and manifests, its snapshots and refs."""
    _, ns, name = ident.split(".")
    files = sorted((warehouse / ns / name / "metadata").glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0]))
    meta = json.loads(files[-1].read_text())
    current = next((s for s in meta.get("snapshots", []) if s["snapshot-id"] == meta.get("current-snapshot-id")), None)
    manifest_list = Path(current["manifest-list"].removeprefix("file:")) if current else None
    rows = spark.sql(f"SELECT count(*) AS n, coalesce(sum(length), 0) AS b FROM {ident}.`manifests`").collect()[0]
    return {"metadata_bytes": files[-1].stat().st_size,
            "manifest_list_bytes": manifest_list.stat().st_size if manifest_list and manifest_list.exists() else 0,
            "manifests": int(rows["n"]), "manifest_bytes": int(rows["b"]),
            "snapshots": len(meta.get("snapshots", [])), "refs": len(meta.get("refs", {}))}


def lake_metadata(spark, warehouse: Path, catalog: str) -> dict:
    """{kind: {table: table_metadata}} of every table of the datamart."""
    out = {}
    for kind, suffix in KINDS:
        ns = f"{DM}{suffix}"
        if spark.catalog.databaseExists(f"{catalog}.{ns}"):
            out[kind] = {t.tableName: table_metadata(spark, warehouse, f"{catalog}.{ns}.{t.tableName}")
                         for t in spark.sql(f"SHOW TABLES IN {catalog}.{ns}").collect()}
    return out


def cli_read(config: Path, table: str, delta: int | None, env: dict) -> tuple[float, int]:
    """(seconds, rows) of `deltaport read DM.table [--as-of-delta N]`, run as users run it."""
    cmd = [sys.executable, "-m", "platform_assets.cli", "read", f"{DM}.{table}", "--config", str(config)]
    cmd += ["--as-of-delta", str(delta)] if delta is not None else []
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    return seconds, len(done.stdout.splitlines())


def timed_calls(spark, layout: LakeLayout, table: str, old: int, last: int) -> dict:
    """Seconds of the reads a steady delta and `deltaport read` make of the lake, one by one, in
    this process: which of them grows with the lake's age."""
    from resources.lake.history_layout import partition_fields
    from resources.lake.history_read import versions_frame
    from resources.lake.history_forms import AsOfDelta
    from resources.lake.prostore import changelog_history, landed_deltas
    from resources.lake.read import entity_as_of
    from resources.spark.iceberg_reads import last_applied_deltas

    ident = layout.snapshot(DM, table)
    columns = [f.name for f in spark.table(ident).schema.fields if f.name != "sys_from"]
    calls = {
        "changelog, every delta": lambda: changelog_history(spark, layout, DM),
        "changelog since the last delta": lambda: changelog_history(spark, layout, DM, since=last),
        "manifest since the last delta": lambda: landed_deltas(spark, layout, DM, since=last),
        "schema as of the old delta": lambda: entity_as_of(spark, layout, DM, table, old),
        "last applied delta": lambda: last_applied_deltas(spark, [ident]),
        # what a writer asks once per process and history table (history_layout.ensure_layout)
        "history partition spec": lambda: partition_fields(spark, history_ident(layout, DM, table)),
        "versions as of the old delta (count)": lambda: versions_frame(
            spark, layout, DM, table, AsOfDelta(old), columns, last=last).count(),
        "increment of the last delta (count)": lambda: spark.table(layout.increment(DM, table)).where(
            f"delta_num = {last}").count(),
    }
    out = {}
    for name, call in calls.items():
        began = time.perf_counter()
        call()
        out[name] = round(time.perf_counter() - began, 2)
    return out


def files_planned(warehouse: Path, ident: str, where: str) -> dict:
    """How many of the table's data files a scan with `where` plans (PyIceberg's planning prunes by
    partition and column bounds, as Spark's does), of how many it has: what an as-of read opens."""
    from resources.lake.pyiceberg_read import load_table

    table = load_table(ident, type="hadoop", catalog=ident.split(".")[0], warehouse=str(warehouse))
    return {"planned": len(list(table.scan(row_filter=where).plan_files())),
            "files": len(list(table.scan().plan_files()))}


def measure(label: str, *, cfg, instance, bootstrap, topics, batches, spark, sc, config_file: Path, env: dict,
            table: str, old: int, truth_old: int, repeat: int, warehouse: Path) -> dict:
    """Land the steady `batches` one sync each, then read the table as of `old` and now."""
    out: dict = {"steady": []}
    last = None
    for n, msgs in batches:
        publish(msgs, bootstrap, topics)
        began = time.perf_counter()
        landed = [d for _, d in sync(cfg, instance, echo=lambda line: None).landed()]
        out["steady"].append(round(time.perf_counter() - began, 2))
        assert landed == [n], (label, landed, n)
        last = n
        print(f"{label}: delta {n} landed by sync in {out['steady'][-1]} s", flush=True)
    for name, delta, want in (("read_old", old, len(sc.truth[DM][truth_old][table])),
                              ("read_current", None, len(sc.truth[DM][last][table]))):
        times = []
        for _ in range(repeat):
            seconds, rows = cli_read(config_file, table, delta, env)
            assert rows == want, (label, name, rows, want)
            times.append(round(seconds, 2))
        out[name] = times
        print(f"{label}: deltaport read {DM}.{table}{'' if delta is None else f' --as-of-delta {delta}'}: "
              f"{times} s ({want} rows)", flush=True)
    out["calls"] = timed_calls(spark, LakeLayout(cfg.lake.catalog), table, old, last)
    print(f"{label}: calls {out['calls']}", flush=True)
    out["history_files"] = files_planned(warehouse, history_ident(LakeLayout(cfg.lake.catalog), DM, table),
                                         f"{history_where(AsOfDelta(old))} AND delta_num <= {int(last)}")
    print(f"{label}: history files an as-of read of delta {old} plans: {out['history_files']}", flush=True)
    out["metadata"] = lake_metadata(spark, warehouse, cfg.lake.catalog)
    out["last_delta"] = last
    return out


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-age-bench-"))
    gap_at = args.warm + args.steady  # the story's deltas from here on are numbered from --age + 1
    sc = build_scenario(EmulatorConfig(
        seed=args.seed, deltas=args.warm + 2 * args.steady, datamarts=(DM,), rows_per_delta=args.rows,
        chunk_size=min(4000, max(50, args.rows // 20)), backup_partitions=3, cancel_rate=0.0,
        outside_write_rate=0.0, ddl_at_delta=None, faults=Faults(), number_gap=(gap_at, args.age + 1 - gap_at)))
    batches = delta_batches(sc.messages)
    warm, young, aged = batches[:args.warm], batches[args.warm:gap_at], batches[gap_at:]
    res: dict = {"config": vars(args), "uptime": [uptime()]}
    print(res["uptime"][0], flush=True)
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work) as engine:
            topics = {SIGNAL: f"bench.age.signal.{os.getpid()}", BACKUP: f"bench.age.backup.{os.getpid()}"}
            create_topic(bootstrap, topics[SIGNAL])
            create_topic(bootstrap, topics[BACKUP], partitions=3)
            raw = {"datamarts": [{"name": DM, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
                   "kafka": {"bootstrap_servers": bootstrap}, "spark": {"remote": engine.url},
                   "lake": {"catalog": "lake", "warehouse": str(work / "lake"),
                            # an aged lake's commits are older than the hour expiry waits for
                            "maintenance": {"expire_after_seconds": 0}},
                   "state_dir": str(work / "state")}
            config_file = work / "deltaport.yaml"
            config_file.write_text(json.dumps(raw))
            cfg = parse_config(raw, str(config_file))
            (work / "dagster").mkdir()
            instance = dg.DagsterInstance.local_temp(str(work / "dagster"))
            env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_REMOTE": engine.url}
            spark, layout = engine.spark, LakeLayout("lake")
            began = time.perf_counter()
            publish([m for _, msgs in warm for m in msgs], bootstrap, topics)
            landed = [d for _, d in sync(cfg, instance, echo=lambda line: None).landed()]
            assert landed == [n for n, _ in warm], landed
            res["warm_seconds"] = round(time.perf_counter() - began, 1)
            print(f"{len(warm)} deltas landed by sync in {res['warm_seconds']} s", flush=True)
            last_warm = warm[-1][0]
            table = max(sc.truth[DM][last_warm], key=lambda t: len(sc.truth[DM][last_warm][t]))
            common = dict(cfg=cfg, instance=instance, bootstrap=bootstrap, topics=topics, spark=spark, sc=sc,
                          config_file=config_file, env=env, table=table, repeat=args.repeat, warehouse=work / "lake")
            res["young"] = measure("age ~100", batches=young, old=args.warm // 2, truth_old=args.warm // 2, **common)
            began = time.perf_counter()
            first, last = young[-1][0] + 1, aged[0][0]
            before, after = sc.delta_dates[DM][first - 1], sc.delta_dates[DM][last]
            aging = age_lake(spark, cfg, instance, DM, first=first, last=last, before=before, after=after,
                             chunk=args.chunk, events=args.events)
            res["aging"] = {"deltas": [first, last - 1], "seconds": aging.seconds,
                            "total_seconds": round(time.perf_counter() - began, 1)}
            print(f"aged deltas {first}..{last - 1} in {res['aging']['total_seconds']} s", flush=True)
            res["uptime"].append(uptime())
            old = args.age // 2  # a generated delta: its state is the truth of the last real one before
            res["aged"] = measure(f"age {args.age}", batches=aged, old=old, truth_old=first - 1, **common)
            res["equal"] = check(spark, layout, sc, aged[-1][0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["uptime"].append(uptime())
    res["table"] = table
    res["summary"] = summary(res)
    return res


def summary(res: dict) -> dict:
    def med(side: str, key: str) -> float:
        values = res[side][key][1:] if key == "steady" and len(res[side][key]) > 1 else res[side][key]
        return statistics.median(values)

    out = {}
    for key in ("steady", "read_old", "read_current"):
        young, aged = med("young", key), med("aged", key)
        out[key] = {"age_100_s": young, "aged_s": aged, "ratio": round(aged / young, 2)}
    out["history_files"] = {"age_100": res["young"]["history_files"], "aged": res["aged"]["history_files"]}
    out["calls"] = {name: {"age_100_s": res["young"]["calls"][name], "aged_s": res["aged"]["calls"][name]}
                    for name in res["aged"]["calls"]}
    def largest(age: str, kind: str, field: str) -> int:
        return max(t[field] for t in res[age]["metadata"][kind].values())

    out["metadata"] = {kind: {"age_100_max_metadata_bytes": largest("young", kind, "metadata_bytes"),
                              "aged_max_metadata_bytes": largest("aged", kind, "metadata_bytes"),
                              "age_100_max_manifests": largest("young", kind, "manifests"),
                              "aged_max_manifests": largest("aged", kind, "manifests"),
                              "aged_max_manifest_bytes": largest("aged", kind, "manifest_bytes")}
                       for kind in res["aged"]["metadata"]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--age", type=int, default=20_000, help="the lake's age (deltas) at the second measure")
    ap.add_argument("--warm", type=int, default=101, help="real deltas landed first (the young lake)")
    ap.add_argument("--steady", type=int, default=3, help="steady deltas measured at each age (the first warms up)")
    ap.add_argument("--rows", type=int, default=2000, help="row changes per delta")
    ap.add_argument("--repeat", type=int, default=3, help="reads of each form at each age")
    ap.add_argument("--chunk", type=int, default=5000, help="generated deltas per commit of a delta-partitioned table")
    ap.add_argument("--events", type=int, default=2000, help="generated partitions given a Dagster materialization")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "age.json")
    return report(run(ap.parse_args(argv)))


def report(res: dict) -> int:
    """Write bench-results/age.json and print the figures; 1 when the lake was not the truth."""
    args = argparse.Namespace(**res["config"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str))
    s = res["summary"]
    for key in ("steady", "read_old", "read_current"):
        print(f"age: {key} {s[key]['age_100_s']} s at ~100 deltas, {s[key]['aged_s']} s at {args.age}: "
              f"{s[key]['ratio']}x")
    for kind, m in s["metadata"].items():
        print(f"age: {kind} tables: newest metadata file <= {m['age_100_max_metadata_bytes']} -> "
              f"{m['aged_max_metadata_bytes']} bytes, manifests <= {m['age_100_max_manifests']} -> "
              f"{m['aged_max_manifests']} ({m['aged_max_manifest_bytes']} bytes)")
    h = s["history_files"]
    print(f"age: history files an as-of read of the old delta plans: {h['age_100']['planned']} of "
          f"{h['age_100']['files']} at ~100 deltas, {h['aged']['planned']} of {h['aged']['files']} at {args.age}")
    for name, c in s["calls"].items():
        print(f"age: {name}: {c['age_100_s']} s at ~100 deltas, {c['aged_s']} s at {args.age}")
    print(f"age: lake equal to the truth: {res['equal']}")
    return 0 if res["equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
