"""The platform measured the way users run it: Kafka -> sensor -> Dagster run -> assets -> lake.

An emulated Prostore datamart (resources/emulator) closes deltas one at a time; after each
close and its backup reach the broker, one `sync` pass (the sensor's code, then the delta's
run, in process, on a Dagster instance) lands it. Measured per delta: wall time from the
close being in Kafka to the snapshot landed, each step's seconds (from the run's events), and
the Iceberg commits each table took (its metadata log grows by one per commit, tags included),
the Spark Connect round trips it made (bench/round_trips.py: by kind, and the busiest call sites
of deltaport's code), and the peak memory of this process (sync and the in-process runs), the
Spark Connect server's JVM and its Python workers (bench/peak_memory.py).
Then a backlog: `--backlog` closed deltas published at once, landed by one `sync` (in range runs
of up to `sensor.max_deltas_per_run`). Each is set against the plain script (bench/plain_script.py:
consume + fastavro + Parquet, the same deltas' tables from the same offsets) run in the same
process: ratio = platform rows/s / script rows/s; likewise against the floor (the same messages
consumed and decoded to Arrow natively, nothing written: bench/plain_script.py `floor`). A second yardstick does what deltaport's tables
promise with Spark and Iceberg alone (bench/iceberg_script.py: per delta and table, an increment
append, a MERGE into the snapshot and a tag, on the same warm engine): its ratio says what the
platform costs over the least a lake with these guarantees must do.
Every landed delta is compared with the emulator's truth (a benchmark of wrong results is void).

    python bench/dagster_bench.py [--deltas 8] [--rows 2000] [--backlog 10]

Results: bench-results/dagster.json and a table on stdout. The engine is one Spark Connect
server (bench/engine.py), warm after the first delta, as in production.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from bench.engine import bench_engine, spark_conf_pair  # noqa: E402
from bench.cpu_time import server_cpu_seconds  # noqa: E402
from bench.dagster_events import counting_events  # noqa: E402
from bench.peak_memory import PeakMemory, max_peak  # noqa: E402
from bench.round_trips import counting_round_trips  # noqa: E402
from bench.sql_log import SqlLog, free_port, ui_conf  # noqa: E402
from bench.iceberg_script import NAMESPACE as ICEBERG_SCRIPT_NS, iceberg_script  # noqa: E402
from bench.plain_script import floor, user_script  # noqa: E402
from platform_assets.config import SensorConfig, parse_config  # noqa: E402
from platform_assets.definitions import index_resource, resources_for  # noqa: E402
from platform_assets.sync import sync  # noqa: E402
from resources.emulator.outgoing import BACKUP, SIGNAL  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.emulator.scenario import EmulatorConfig, Faults, build_scenario  # noqa: E402
from resources.prostore.delta_index import DeltaIndex  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402
from resources.lake.read import rows_as_of  # noqa: E402

DM = "marketing"


def delta_ranges(index: DeltaIndex, topic: str, n: int) -> dict[str, dict[int, tuple[int, int]]]:
    """{table: {partition: (start, end)}} of delta n's chosen increment, as a user's committed
    offsets would give them to a script."""
    _, refs = index.chosen_messages(topic, DM, n)
    ranges: dict[str, dict[int, tuple[int, int]]] = {}
    for r in refs:
        if r.table_name:
            lo, hi = ranges.setdefault(r.table_name, {}).get(r.partition, (r.offset, r.offset + 1))
            ranges[r.table_name][r.partition] = (min(lo, r.offset), max(hi, r.offset + 1))
    return ranges


def plain_script(bootstrap: str, topic: str, index: DeltaIndex, deltas: list[int], out: Path) -> tuple[int, float]:
    """(rows, seconds) of the plain script landing the same deltas' tables as Parquet."""
    rows, t0 = 0, time.perf_counter()
    for n in deltas:
        ranges = delta_ranges(index, topic, n)
        for table, rng in sorted(ranges.items()):
            rows += user_script(bootstrap, topic, rng, datamart=DM, delta=n, table=table,
                                out=out / f"plain-{n}-{table}.parquet")
    return rows, time.perf_counter() - t0


def floor_script(bootstrap: str, topic: str, index: DeltaIndex, deltas: list[int]) -> tuple[int, float]:
    """(rows, seconds) of the floor on the same deltas: each delta's changelog read for its
    tables' columns, then its data messages consumed and decoded to Arrow natively
    (bench/plain_script.py `floor`), nothing written: the least any reader must do."""
    from resources.codecs.backup import MESSAGE_TYPE_CHANGELOG, iter_changelog
    from resources.codecs.ddl import replay_changelog
    from resources.kafka.fetch import fetch_values
    from resources.lake.prostore import data_tables

    rows, t0 = 0, time.perf_counter()
    for n in deltas:
        _, refs = index.chosen_messages(topic, DM, n)
        logs = [(r.partition, r.offset) for r in refs if r.message_type == MESSAGE_TYPE_CHANGELOG]
        values = fetch_values(bootstrap, topic, logs)
        tables = data_tables(replay_changelog([c for ref in logs for c in iter_changelog(values[ref])]))
        for table, entity in sorted(tables.items()):
            wanted: dict[int, list[int]] = {}
            for r in refs:
                if r.table_name == table and r.message_type != MESSAGE_TYPE_CHANGELOG:
                    wanted.setdefault(r.partition, []).append(r.offset)
            if wanted:
                rows += floor(bootstrap, topic, wanted, entity.columns)
    return rows, time.perf_counter() - t0


def spark_iceberg_script(spark, bootstrap: str, topic: str, index: DeltaIndex, deltas: list[int],
                         sc) -> tuple[int, float]:
    """(rows, seconds) of the Spark+Iceberg script (bench/iceberg_script.py) landing the same
    deltas on the same engine: increment append, MERGE and tag per delta and table."""
    if not deltas:
        return 0, 0.0
    keys = {name: t.primary_key for name, t in sc.databases[DM].tables.items()}
    out = iceberg_script(spark, bootstrap, topic, DM, [(n, delta_ranges(index, topic, n)) for n in deltas], keys,
                         namespace=f"lake.{ICEBERG_SCRIPT_NS}")
    # A yardstick that did less than it claims would flatter the platform: its tables must hold
    # the truth's row count as of the last delta it landed.
    if not check_iceberg_script(spark, sc, deltas[-1], f"lake.{ICEBERG_SCRIPT_NS}"):
        raise AssertionError(f"the Spark+Iceberg script's tables after delta {deltas[-1]} differ from the truth")
    return out


def check_iceberg_script(spark, sc, n: int, namespace: str) -> bool:
    """Whether every table the Spark+Iceberg script landed in `namespace` holds the truth's row
    count as of delta n (a missing table holds none); the first that does not is printed."""
    for table, state in sc.truth[DM][n].items():
        ident = f"{namespace}.{table}"
        got = spark.table(ident).count() if spark.catalog.tableExists(ident) else 0
        if got != len(state):
            print(f"the Spark+Iceberg script's {table} has {got} rows after delta {n}, the truth {len(state)}")
            return False
    return True


def delta_batches(messages) -> list[tuple[int, list]]:
    """The traffic cut after each closed delta's last backup message: [(delta, messages up to it)]."""
    cuts, last = [], {}
    for i, m in enumerate(messages):
        if m.role == BACKUP:
            last[int(m.note.split(":")[1])] = i
    start = 0
    for n, end in sorted(last.items(), key=lambda kv: kv[1]):
        cuts.append((n, messages[start:end + 1]))
        start = end + 1
    if start < len(messages) and cuts:
        cuts[-1] = (cuts[-1][0], cuts[-1][1] + messages[start:])
    return cuts


_METADATA_VERSION = re.compile(r"v?(\d+)[.-]")  # v12.metadata.json, 00012-<uuid>.metadata.json


def commit_counts(spark, catalog: str, source: str = DM) -> dict[str, int]:
    """{table: its current metadata version} of every table of the source (one version per
    commit: v12.metadata.json in a hadoop catalog, 00012-<uuid>.metadata.json in others). The
    number, not the length of the metadata log: tables keep only their last metadata files."""
    out = {}
    for ns in (source, f"{source}_increment", f"{source}_meta"):
        if not spark.catalog.databaseExists(f"{catalog}.{ns}"):
            continue
        for t in spark.sql(f"SHOW TABLES IN {catalog}.{ns}").collect():
            ident = f"{catalog}.{ns}.{t.tableName}"
            files = [r.file for r in spark.table(f"{ident}.metadata_log_entries").select("file").collect()]
            out[f"{ns}.{t.tableName}"] = max(int(_METADATA_VERSION.match(f.rsplit("/", 1)[-1]).group(1))
                                             for f in files)
    return out


def step_seconds(instance: dg.DagsterInstance, run_ids: list[str]) -> dict[str, float]:
    """Seconds per step of the runs, and per asset as its materialization reports them (the
    assets of one step overlap: their seconds add up to more than the step's)."""
    out: dict[str, float] = {}
    for run_id in run_ids:
        for stats in instance.get_run_step_stats(run_id):
            if stats.end_time and stats.start_time:
                key = f"step {stats.step_key.split('__', 1)[-1]}"
                out[key] = out.get(key, 0.0) + stats.end_time - stats.start_time
        for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
            mat = record.event_log_entry.asset_materialization
            seconds = mat.metadata.get("seconds") if mat else None
            if seconds is not None:
                key = mat.asset_key.path[-1]
                out[key] = out.get(key, 0.0) + seconds.value
    return out


def check(spark, layout, sc, n: int) -> bool:
    ok = True
    for table, state in sc.truth[DM][n].items():
        pk = sc.databases[DM].tables[table].primary_key
        want = sorted(state.values(), key=lambda r: tuple(r[k] for k in pk))
        ok &= rows_as_of(spark, layout, DM, table, n) == want
    return ok


def check_counts(spark, layout, sc, n: int) -> bool:
    """Delta n's row count of every table, counted by Spark (for backlogs too big to bring every
    delta's rows into Python; `check` of the last delta compares the rows themselves)."""
    from resources.lake.prostore_snapshot import snapshot_as_of

    return all(snapshot_as_of(spark, layout, DM, table, n, sc.databases[DM].tables[table].primary_key).count()
               == len(state) for table, state in sc.truth[DM][n].items())


def check_backlog(spark, layout, sc, landed: list[int], how: str) -> bool:
    if how == "rows":
        return all(check(spark, layout, sc, n) for n in landed)
    print(f"checking the backlog: row counts of {len(landed)} deltas, rows of the last", flush=True)
    return all(check_counts(spark, layout, sc, n) for n in landed[:-1]) and check(spark, layout, sc, landed[-1])


def bench_scenario(args):
    """The emulated datamart the platform benchmarks land: `args.deltas` steady deltas then a
    backlog of `args.backlog` (after `args.warm_backlog` landed untimed), about `args.rows` changes
    each, no faults, no cancelled delta."""
    return build_scenario(EmulatorConfig(seed=args.seed, deltas=args.deltas + args.warm_backlog + args.backlog,
                                         datamarts=(DM,),
                                         rows_per_delta=args.rows, chunk_size=min(4000, max(50, args.rows // 20)),
                                         backup_partitions=3, cancel_rate=0.0, outside_write_rate=0.0,
                                         faults=Faults()))


def bench_setup(bootstrap: str, engine, work: Path, *, max_per_run: int | None = None):
    """(config, topics, delta index) of the bench's datamart: its two topics created on the
    broker (the backup topic with 3 partitions, as the scenario writes it), the lake and state
    under `work`, the engine's server."""
    topics = {SIGNAL: f"bench.signal.{os.getpid()}", BACKUP: f"bench.backup.{os.getpid()}"}
    create_topic(bootstrap, topics[SIGNAL])
    create_topic(bootstrap, topics[BACKUP], partitions=3)
    cfg = parse_config({"datamarts": [{"name": DM, "signal_topic": topics[SIGNAL], "backup_topic": topics[BACKUP]}],
                        "kafka": {"bootstrap_servers": bootstrap},
                        "spark": {"remote": engine.url},
                        "lake": {"catalog": "lake", "warehouse": str(work / "lake")},
                        "state_dir": str(work / "state"),
                        "sensor": {"max_deltas_per_run": max_per_run or SensorConfig().max_deltas_per_run}})
    return cfg, topics, index_resource(cfg).get()


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-dagster-bench-"))
    os.environ["DAGSTER_HOME"] = str(work / "dagster")
    (work / "dagster").mkdir()
    sc = bench_scenario(args)
    batches = delta_batches(sc.messages)
    res: dict = {"config": vars(args), "steady": [], "backlog": {}}
    peaks = []  # per steady delta: this process (sync + in-process runs), the Spark server, its workers
    ui_port = free_port() if args.sql else None
    conf = {**(ui_conf(ui_port) if ui_port else {}), **dict(args.spark_conf)}
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work, conf=conf) as engine:
            sql = SqlLog(ui_port) if ui_port else None
            cfg, topics, index = bench_setup(bootstrap, engine, work, max_per_run=args.max_per_run)
            layout = LakeLayout("lake")
            # The platform's own session: Iceberg caches table metadata per session's catalog.
            spark = resources_for(cfg)["spark"].get_session()
            res["engine_start_s"] = round(engine.start_seconds, 2)
            with dg.DagsterInstance.get() as instance:
                steady = batches[:args.deltas]
                warm = batches[args.deltas:args.deltas + args.warm_backlog]
                backlog = batches[args.deltas + args.warm_backlog:]
                for n, msgs in steady:
                    before = commit_counts(spark, "lake")
                    publish(msgs, bootstrap, topics)
                    outcome_at: list[float] = []  # sync echoes a line as each run ends
                    cpu0 = server_cpu_seconds(engine.server_pid)
                    if sql:
                        sql.mark()
                    with (PeakMemory(engine.server_pid) as mem, counting_round_trips() as trips,
                          counting_events(instance) as events):
                        t0, client0 = time.perf_counter(), time.process_time()
                        profile = cProfile.Profile() if n == args.profile else None
                        if profile:
                            profile.enable()
                        out = sync(cfg, instance, echo=lambda line: outcome_at.append(time.perf_counter()))
                        if profile:
                            profile.disable()
                            pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile_lines)
                        seconds, client_cpu = time.perf_counter() - t0, time.process_time() - client0
                    cpu1 = server_cpu_seconds(engine.server_pid)
                    executions = sql.since() if sql else None
                    peaks.append(mem.peak)
                    # From the tick that sees the close to the run's end; the sync goes on with
                    # ticks that find nothing left, which a daemon's sensor would do meanwhile.
                    landed_s = (outcome_at[-1] - t0) if outcome_at else seconds
                    landed = [n for _, n in out.landed()]
                    after = commit_counts(spark, "lake")
                    rows = sum(sum(o.rows.values()) for o in out.outcomes)
                    runs = [r.run_id for r in instance.get_runs(limit=len(out.outcomes))]
                    entry = {"delta": n, "landed": landed, "seconds": round(seconds, 2),
                             "close_to_landed_s": round(landed_s, 2), "rows": rows,
                             "steps": {k: round(v, 2) for k, v in step_seconds(instance, runs).items()},
                             "commits": {t: after[t] - before.get(t, 0) for t in after},
                             "equal": landed == [n] and check(spark, layout, sc, n),
                             "peak_memory_mib": mem.peak.to_dict(), "spark_round_trips": trips.to_dict(),
                             "dagster_events": events.to_dict()}
                    if executions is not None:
                        entry["sql_executions"] = executions
                    _, entry["plain_seconds"] = plain_script(bootstrap, topics[BACKUP], index, landed, work)
                    entry["plain_seconds"] = round(entry["plain_seconds"], 3)
                    _, floor_s = floor_script(bootstrap, topics[BACKUP], index, landed)
                    entry["floor_seconds"] = round(floor_s, 3)
                    cpu2 = server_cpu_seconds(engine.server_pid)
                    _, iceberg_s = spark_iceberg_script(engine.spark, bootstrap, topics[BACKUP], index, landed, sc)
                    cpu3 = server_cpu_seconds(engine.server_pid)
                    entry["iceberg_script_seconds"] = round(iceberg_s, 3)
                    if cpu0 is not None and cpu3 is not None:  # the server's work, whatever overlapped
                        entry["server_cpu_s"] = round(cpu1 - cpu0, 2)
                        entry["iceberg_script_server_cpu_s"] = round(cpu3 - cpu2, 2)
                    # This process: the sync, the sensor, the run (in process), decoding the delta.
                    entry["client_cpu_s"] = round(client_cpu, 2)
                    res["steady"].append(entry)
                    print(f"delta {n}: {seconds:.2f} s (landed after {landed_s:.2f} s), {rows} rows, steps {entry['steps']}, "
                          f"commits {sum(entry['commits'].values())}, Spark round trips {trips.total} "
                          f"({trips.to_dict()['seconds_waited']} s waited), equal {entry['equal']}; plain script "
                          f"{entry['plain_seconds']} s, floor {entry['floor_seconds']} s, Spark+Iceberg script "
                          f"{entry['iceberg_script_seconds']} s; server CPU {entry.get('server_cpu_s')} s "
                          f"(Spark+Iceberg script {entry.get('iceberg_script_server_cpu_s')} s), "
                          f"client CPU {entry['client_cpu_s']} s; Dagster events {events.total} "
                          f"({events.seconds:.2f} s writing)", flush=True)
                    if executions is not None:
                        print_executions(executions)
                    if args.timeline:
                        print("\n".join(trips.timeline_text()))
                    if args.trace_round_trips:
                        for site in trips.to_dict(top=args.trace_round_trips)["top_sites"]:
                            print(f"    {site['calls']:4d} {site['seconds']:7.3f} s  {site['site']}", flush=True)
                if warm:  # both sides land a backlog once, untimed: the range path's code compiled (JIT) on both
                    publish([m for _, msgs in warm for m in msgs], bootstrap, topics)
                    t0 = time.perf_counter()
                    landed = [n for _, n in sync(cfg, instance, echo=lambda line: None).landed()]
                    warm_s = time.perf_counter() - t0
                    _, warm_script_s = spark_iceberg_script(engine.spark, bootstrap, topics[BACKUP], index, landed, sc)
                    ok = landed == [n for n, _ in warm] and check(spark, layout, sc, landed[-1])
                    res["warm_backlog"] = {"deltas": landed, "seconds": round(warm_s, 2),
                                           "iceberg_script_seconds": round(warm_script_s, 2), "equal": ok}
                    print(f"warm-up backlog of {len(warm)} (untimed): {warm_s:.1f} s, Spark+Iceberg script "
                          f"{warm_script_s:.1f} s, equal {ok}", flush=True)
                if backlog:
                    before = commit_counts(spark, "lake")
                    publish([m for _, msgs in backlog for m in msgs], bootstrap, topics)
                    if sql:
                        sql.mark()
                    with (PeakMemory(engine.server_pid) as mem, counting_round_trips() as trips,
                          counting_events(instance) as events):
                        t0 = time.perf_counter()
                        profile = cProfile.Profile() if args.profile == -1 else None
                        if profile:
                            profile.enable()
                        out = sync(cfg, instance, echo=lambda line: None)
                        seconds = time.perf_counter() - t0
                        if profile:
                            profile.disable()
                            pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile_lines)
                    backlog_peak = mem.peak
                    executions = sql.since() if sql else None
                    after = commit_counts(spark, "lake")
                    landed = [n for _, n in out.landed()]
                    res["backlog"] = {
                        "deltas": len(backlog), "landed": landed, "seconds": round(seconds, 2),
                        "seconds_per_delta": round(seconds / max(1, len(landed)), 2),
                        "rows": sum(sum(o.rows.values()) for o in out.outcomes),
                        "commits": sum(after.values()) - sum(before.get(t, 0) for t in after),
                        "equal": None}
                    print(f"backlog of {len(backlog)} landed in {seconds:.1f} s; checking it", flush=True)
                    res["backlog"]["equal"] = (landed == [n for n, _ in backlog]
                                               and check_backlog(spark, layout, sc, landed, args.check))
                    res["backlog"]["runs"] = len(out.outcomes)
                    res["backlog"]["spark_round_trips"] = trips.to_dict(top=args.trace_round_trips or 12)
                    res["backlog"]["dagster_events"] = events.to_dict()
                    if executions is not None:
                        res["backlog"]["sql_executions"] = executions
                        print_executions(executions)
                    for site in res["backlog"]["spark_round_trips"]["top_sites"][:args.trace_round_trips]:
                        print(f"    {site['calls']:4d} {site['seconds']:7.3f} s  {site['site']}", flush=True)
                    res["backlog"]["peak_memory_mib"] = backlog_peak.to_dict()
                    runs = [r.run_id for r in instance.get_runs(limit=len(out.outcomes))]
                    res["backlog"]["steps"] = {k: round(v, 2) for k, v in step_seconds(instance, runs).items()}
                    plain_rows, plain_s = plain_script(bootstrap, topics[BACKUP], index, landed, work)
                    res["backlog"]["plain_script"] = {"rows": plain_rows, "seconds": round(plain_s, 2)}
                    res["backlog"]["rows_per_s_ratio_vs_plain"] = round(
                        (res["backlog"]["rows"] / seconds) / (plain_rows / plain_s), 3) if plain_rows else None
                    floor_rows, floor_s = floor_script(bootstrap, topics[BACKUP], index, landed)
                    res["backlog"]["floor"] = {"rows": floor_rows, "seconds": round(floor_s, 2)}
                    res["backlog"]["rows_per_s_ratio_vs_floor"] = round(
                        (res["backlog"]["rows"] / seconds) / (floor_rows / floor_s), 3) if floor_rows else None
                    ice_rows, ice_s = spark_iceberg_script(engine.spark, bootstrap, topics[BACKUP], index, landed, sc)
                    res["backlog"]["iceberg_script"] = {"rows": ice_rows, "seconds": round(ice_s, 2)}
                    res["backlog"]["rows_per_s_ratio_vs_iceberg_script"] = round(
                        (res["backlog"]["rows"] / seconds) / (ice_rows / ice_s), 3) if ice_rows else None
                    print(f"backlog of {len(backlog)}: {res['backlog']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    warm = [e for e in res["steady"][1:]] or res["steady"]
    with_rows = [e for e in warm if e["rows"]]  # a ratio of rows/s needs rows
    res["summary"] = {
        "median_seconds_per_delta_warm": statistics.median(e["seconds"] for e in warm) if warm else None,
        "median_close_to_landed_s_warm": statistics.median(e["close_to_landed_s"] for e in warm) if warm else None,
        "median_commits_per_delta": statistics.median(sum(e["commits"].values()) for e in warm) if warm else None,
        "median_round_trips_per_delta": statistics.median(
            e["spark_round_trips"]["round_trips"] for e in warm) if warm else None,
        "backlog_round_trips_per_delta": round(res["backlog"]["spark_round_trips"]["round_trips"]
                                               / max(1, len(res["backlog"]["landed"])), 1) if res["backlog"] else None,
        # same rows, so the rows/s ratio is the inverse ratio of the times
        "median_steady_ratio_vs_plain": statistics.median(
            e["plain_seconds"] / e["seconds"] for e in with_rows) if with_rows else None,
        "backlog_ratio_vs_plain": res["backlog"].get("rows_per_s_ratio_vs_plain"),
        "median_steady_ratio_vs_floor": statistics.median(
            e["floor_seconds"] / e["seconds"] for e in with_rows) if with_rows else None,
        "backlog_ratio_vs_floor": res["backlog"].get("rows_per_s_ratio_vs_floor"),
        "median_steady_ratio_vs_iceberg_script": statistics.median(
            e["iceberg_script_seconds"] / e["seconds"] for e in with_rows) if with_rows else None,
        "median_close_to_landed_ratio_vs_iceberg_script": statistics.median(
            e["iceberg_script_seconds"] / e["close_to_landed_s"] for e in with_rows) if with_rows else None,
        "backlog_ratio_vs_iceberg_script": res["backlog"].get("rows_per_s_ratio_vs_iceberg_script"),
        "all_equal": all(e["equal"] for e in res["steady"]) and res["backlog"].get("equal", True)
                     and res.get("warm_backlog", {}).get("equal", True),
        "steady_peak_memory_mib": (max_peak(peaks).to_dict() if peaks else None),
        "backlog_peak_memory_mib": res["backlog"].get("peak_memory_mib"),
    }
    return res


def print_executions(executions: list[dict]) -> None:
    """The server's SQL executions of a phase, in order: start (s after the phase began), seconds, plan."""
    print(f"    {len(executions)} SQL executions, {sum(e['s'] for e in executions):.2f} s summed", flush=True)
    for e in executions:
        print(f"    {e['start_s'] if e['start_s'] is not None else '?':>7} {e['s']:6.2f} s  {e['what']}", flush=True)


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.3f}x"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deltas", type=int, default=6, help="deltas landed one at a time (the first one warms up)")
    ap.add_argument("--backlog", type=int, default=6, help="deltas then landed by one sync")
    ap.add_argument("--warm-backlog", type=int, default=0, metavar="N",
                    help="before the backlog, N deltas landed by one sync and by the Spark+Iceberg script, "
                         "untimed: both sides' backlog code warmed up (JIT) alike")
    ap.add_argument("--rows", type=int, default=2000, help="row changes per delta")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--max-per-run", type=int, default=SensorConfig().max_deltas_per_run,
                    help="sensor.max_deltas_per_run (1: a run per delta; default: deltaport's)")
    ap.add_argument("--trace-round-trips", type=int, default=0, metavar="N",
                    help="print each steady delta's N busiest call sites of Spark round trips")
    ap.add_argument("--timeline", action="store_true",
                    help="print every Spark round trip of each steady delta: start, end, thread, call site")
    ap.add_argument("--sql", action="store_true",
                    help="turn the embedded server's UI on and print every Spark SQL execution of each steady delta "
                         "and of the backlog: its start, seconds and plan (bench/sql_log.py)")
    ap.add_argument("--profile", type=int, default=None, metavar="N",
                    help="cProfile steady delta N's sync (-1: the backlog's; its main thread: the sensor, Dagster, "
                         "the step's own thread) and print the busiest functions by cumulative time")
    ap.add_argument("--profile-lines", type=int, default=60, help="functions --profile prints")
    ap.add_argument("--check", choices=("rows", "counts"), default="rows",
                    help="backlog check: every delta's rows (default), or every delta's row count and the "
                         "last delta's rows (a backlog of many big deltas)")
    ap.add_argument("--spark-conf", type=spark_conf_pair, action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the embedded Spark server over deltaport's defaults (repeatable), "
                         "e.g. spark.sql.codegen.wholeStage=true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "dagster.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    res = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    print(json.dumps(res["summary"]))
    sm = res["summary"]
    print("\nrows/s ratios (steady | backlog):")
    for base, name in (("plain", "plain script (consume + fastavro + Parquet)"), ("floor", "floor (consume + decode)"),
                       ("iceberg_script", "Spark+Iceberg script (same tables, delta by delta)")):
        print(f"  vs {name:52} {_ratio(sm.get(f'median_steady_ratio_vs_{base}'))} | "
              f"{_ratio(sm.get(f'backlog_ratio_vs_{base}'))}")
    print(f"wrote {args.out}")
    return 0 if res["summary"]["all_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
