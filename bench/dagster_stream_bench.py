"""Change streams measured the way users run them: Kafka -> sealing sensor -> Dagster run -> assets -> lake.

Per format (Qlik Replicate, DataWorks, Datastream), the emulator's story (resources/emulator),
sized so that each delta holds about `--rows` row changes, goes through two scenarios, each on a
topic and source of its own:
- steady: `--deltas` slices of the story published one at a time, each landed by one `sync`
  pass (the sealing sensor's code, then the delta's run, in process, on a Dagster instance, as
  `deltaport sync` does): seconds from the sync's start to the run's end, rows, Iceberg commits
  and Spark Connect round trips per delta; the first delta warms the engine and is left out of
  the medians;
- backlog: `--backlog` deltas' worth published at once and landed by one `sync` (range runs of
  up to `--max-per-run` deltas).
Each is set against the plain script run in this process on the same sealed offsets
(bench/stream_bench.py `user_script`: consume, decode with the same decoder, one Parquet file
per table and delta; no order, no de-duplication, no state): ratio = our rows/s over the
script's; likewise against the floor (bench/stream_bench.py `floor`: the same offsets consumed
and decoded, nothing written). A second yardstick, the Spark+Iceberg script (bench/iceberg_script.py), decodes the same
way and then appends each table's changes to an increment table, MERGEs each key's last change
into a snapshot and tags it, per delta on the same warm engine (no partial captures, late changes
or de-duplication: it does less). Both sources' snapshots as of their last delta are compared with the story's truth
(resources/emulator/stream_oracle.py); a benchmark of wrong results is void (exit 1).

    python bench/dagster_stream_bench.py [--formats qlik,dataworks,datastream] [--rows 5000]
        [--deltas 4] [--backlog 10]

Results: bench-results/dagster_streams.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
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

from bench.dagster_bench import commit_counts, step_seconds  # noqa: E402
from bench.engine import bench_engine, spark_conf_pair  # noqa: E402
from bench.iceberg_script import NAMESPACE as ICEBERG_SCRIPT_NS, land_changes_table  # noqa: E402
from bench.peak_memory import PeakMemory, max_peak  # noqa: E402
from bench.round_trips import counting_round_trips  # noqa: E402
from bench.stream_bench import change_row, decoded_changes, floor, user_script  # noqa: E402
from platform_assets.cli.emulate_cmd import stream_story  # noqa: E402
from platform_assets.config import SensorConfig, parse_config  # noqa: E402
from platform_assets.definitions import ledger_resource, resources_for  # noqa: E402
from platform_assets.sync import sync  # noqa: E402
from resources.emulator.stream_oracle import row_diff, truth_after  # noqa: E402
from resources.errors import DecodeError  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.lake.cdc import cdc_rows_as_of  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402
from resources.lake.stream_changelog import changes_by_table  # noqa: E402
from resources.changestream.sealing import make_decoder, read_delta  # noqa: E402

# Story size per format for about one row change per unit: Qlik transactions carry ~2.7 messages,
# DataWorks ~6 (BEGIN/END and heartbeats among them), Datastream steps ~1.3.
UNITS_PER_ROW = {"qlik": 1 / 2.2, "dataworks": 1 / 4.0, "datastream": 1 / 1.2}


def story_for(fmt: str, rows: int, seed: int):
    return stream_story(fmt, seed, max(20, int(rows * UNITS_PER_ROW[fmt])), "json")


def slices(messages: list, count: int) -> list[list]:
    """`messages` cut into `count` consecutive slices of about the same size."""
    size = -(-len(messages) // count)
    return [messages[i:i + size] for i in range(0, len(messages), size)]


def plain_script(bootstrap: str, fmt: str, topic: str, deltas, out: Path, decode) -> tuple[int, float]:
    """(rows, seconds) of the plain script over each sealed delta's offsets, one after the other,
    with one decoder for the topic (it learns Qlik table structures as a long-running consumer)."""
    rows, seconds = 0, 0.0
    for d in deltas:
        got = user_script(bootstrap, fmt, topic, out / f"{topic}-{d.delta_num}", 1, ranges=d.ranges, decode=decode)
        rows, seconds = rows + got["rows"], seconds + got["seconds"]
    return rows, seconds


def floor_script(bootstrap: str, fmt: str, topic: str, deltas, decode) -> tuple[int, float]:
    """(rows, seconds) of the floor (bench/stream_bench.py `floor`) over each sealed delta's offsets."""
    rows, seconds = 0, 0.0
    for d in deltas:
        got = floor(bootstrap, fmt, topic, ranges=d.ranges, decode=decode)
        rows, seconds = rows + got["rows"], seconds + got["seconds"]
    return rows, seconds


def iceberg_script(spark, bootstrap: str, fmt: str, topic: str, deltas, decode) -> tuple[int, float]:
    """(rows, seconds) of the Spark+Iceberg script (bench/iceberg_script.py) over each sealed
    delta's offsets: the same decoding as the plain script, then per table an increment append,
    a MERGE of each key's last change and a tag, on the same warm engine."""
    namespace = f"lake.{ICEBERG_SCRIPT_NS}_" + re.sub(r"\W", "_", topic)  # one per topic
    rows, t0 = 0, time.perf_counter()
    for d in deltas:
        for table, chs in sorted(changes_by_table(decoded_changes(bootstrap, topic, d.ranges, decode)).items()):
            land_changes_table(spark, namespace, table, d.delta_num,
                               [{**change_row(c), "_seq": i} for i, c in enumerate(chs)], chs[0].key_columns)
            rows += len(chs)
    return rows, time.perf_counter() - t0


def lake_equals_truth(spark, layout, bootstrap: str, ledger, fmt: str, source: str, story) -> bool:
    """The snapshot as of the source's last sealed delta equals the story's truth for what the
    sealed deltas hold (the story's final state, once everything landed)."""
    sealed = ledger.sealed_deltas(source)
    if not sealed:
        return False
    records = [r for d in sealed for _, rs in read_delta(bootstrap, ledger, source, d.delta_num, fmt, timeout=20)
               if not isinstance(rs, DecodeError) for r in rs]
    truth = truth_after(fmt, story, records, sealed[-1].watermark_us)
    if truth is None:  # e.g. a Datastream watermark still inside the backfill: nothing to compare
        print(f"  {source}: the truth after delta {sealed[-1].delta_num} is not known; not compared")
        return False
    last = sealed[-1].delta_num
    for table, rows in truth.items():
        diff = row_diff(cdc_rows_as_of(spark, layout, source, table, last) if rows else [], rows)
        if any(diff.values()):
            print(f"  {source}.{table} as of delta {last} differs from the truth: "
                  f"{len(diff['only_in_lake'])} rows only in the lake, {len(diff['only_in_truth'])} only in the truth")
            return False
    return True


def landed_rows(out) -> int:
    return sum(sum(o.rows.values()) for o in out.outcomes if o.success)


def bench_format(fmt: str, args, bootstrap: str, engine, work: Path) -> dict:
    steady_story = story_for(fmt, args.rows * args.deltas, args.seed)
    backlog_story = story_for(fmt, args.rows * args.backlog, args.seed + 1) if args.backlog else None
    topics = {"steady": f"bench.{fmt}.steady.{os.getpid()}", "backlog": f"bench.{fmt}.backlog.{os.getpid()}"}
    sources = {"steady": f"{fmt}_steady", "backlog": f"{fmt}_backlog"}
    for t in topics.values():
        create_topic(bootstrap, t)
    lateness = {"lateness_seconds": getattr(steady_story, "max_lateness_us", 0) / 1e6} if fmt == "datastream" else {}
    # Steady: one delta per slice (no row limit; the idle flush seals each slice at once).
    # Backlog: deltas of about --rows, as the sealing limit cuts them.
    limits = {"steady": {"max_rows": 100 * args.rows}, "backlog": {"max_rows": args.rows}}
    cfgs = {s: parse_config({
        "sources": [{"name": sources[s], "format": fmt, "topic": topics[s], "idle_seconds": 0,
                     "max_seconds": 1e9, **limits[s], **lateness}],
        "kafka": {"bootstrap_servers": bootstrap},
        "spark": {"remote": engine.url},
        "lake": {"catalog": "lake", "warehouse": str(work / "lake")},
        "state_dir": str(work / "state"),
        "sensor": {"max_deltas_per_run": args.max_per_run, "max_messages_per_tick": 200_000},
    }) for s in ("steady", "backlog")}
    cfg = cfgs["steady"]
    decoders = {s: make_decoder(fmt) for s in ("steady", "backlog")}
    script_decoders = {s: make_decoder(fmt) for s in ("steady", "backlog")}  # the second yardstick's own
    floor_decoders = {s: make_decoder(fmt) for s in ("steady", "backlog")}
    layout = LakeLayout("lake")
    spark = resources_for(cfg)["spark"].get_session()
    ledger = ledger_resource(cfg).get()
    res: dict = {"steady": [], "backlog": {}}
    peaks = []
    with dg.DagsterInstance.get() as instance:
        for i, part in enumerate(slices(steady_story.messages, args.deltas)):
            before = commit_counts(spark, "lake", sources["steady"])
            publish(part, bootstrap, {fmt: topics["steady"]})
            ended: list[float] = []
            with PeakMemory(engine.server_pid) as mem, counting_round_trips() as trips:
                t0 = time.perf_counter()
                out = sync(cfgs["steady"], instance, echo=lambda line: ended.append(time.perf_counter()))
                seconds = time.perf_counter() - t0
            peaks.append(mem.peak)
            landed = [n for _, n in out.landed()]
            sealed = [ledger.delta(sources["steady"], n) for n in landed]
            after = commit_counts(spark, "lake", sources["steady"])
            runs = [r.run_id for r in instance.get_runs(limit=len(out.outcomes))]
            entry = {"slice": i, "landed": landed, "ok": out.ok, "seconds": round(seconds, 2),
                     "close_to_landed_s": round((ended[-1] - t0) if ended else seconds, 2),
                     "rows": landed_rows(out), "messages": sum(d.messages for d in sealed),
                     "steps": {k: round(v, 2) for k, v in step_seconds(instance, runs).items()},
                     "commits": sum(after.values()) - sum(before.get(t, 0) for t in after),
                     "spark_round_trips": trips.total, "peak_memory_mib": mem.peak.to_dict()}
            entry["plain_rows"], plain_s = plain_script(bootstrap, fmt, topics["steady"], sealed, work / "plain",
                                                        decoders["steady"])
            entry["plain_seconds"] = round(plain_s, 3)
            entry["floor_rows"], floor_s = floor_script(bootstrap, fmt, topics["steady"], sealed,
                                                        floor_decoders["steady"])
            entry["floor_seconds"] = round(floor_s, 3)
            _, iceberg_s = iceberg_script(engine.spark, bootstrap, fmt, topics["steady"], sealed,
                                          script_decoders["steady"])
            entry["iceberg_script_seconds"] = round(iceberg_s, 3)
            res["steady"].append(entry)
            print(f"{fmt} steady slice {i}: deltas {landed}, {entry['rows']} rows in {seconds:.2f} s (landed after "
                  f"{entry['close_to_landed_s']} s), steps {entry['steps']}, commits {entry['commits']}, "
                  f"round trips {trips.total}; plain script {plain_s:.2f} s, floor {floor_s:.2f} s, "
                  f"Spark+Iceberg script {iceberg_s:.2f} s",
                  flush=True)
            if args.timeline:
                print("\n".join(trips.timeline_text()))
            for site in trips.to_dict(top=args.trace_round_trips)["top_sites"] if args.trace_round_trips else []:
                print(f"    {site['calls']:4d} {site['seconds']:7.3f} s  {site['site']}", flush=True)
        res["steady_equal"] = lake_equals_truth(spark, layout, bootstrap, ledger, fmt, sources["steady"], steady_story)
        if backlog_story is not None:
            before = commit_counts(spark, "lake", sources["backlog"])
            publish(backlog_story.messages, bootstrap, {fmt: topics["backlog"]})
            with PeakMemory(engine.server_pid) as mem, counting_round_trips() as trips:
                t0 = time.perf_counter()
                out = sync(cfgs["backlog"], instance, echo=lambda line: None)
                seconds = time.perf_counter() - t0
            landed = [n for _, n in out.landed()]
            sealed = [ledger.delta(sources["backlog"], n) for n in landed]
            after = commit_counts(spark, "lake", sources["backlog"])
            runs = [r.run_id for r in instance.get_runs(limit=len(out.outcomes))]
            rows = landed_rows(out)
            plain_rows, plain_s = plain_script(bootstrap, fmt, topics["backlog"], sealed, work / "plain",
                                                decoders["backlog"])
            res["backlog"] = {
                "deltas": len(landed), "runs": len(out.outcomes), "ok": out.ok, "rows": rows,
                "seconds": round(seconds, 2), "seconds_per_delta": round(seconds / max(1, len(landed)), 2),
                "commits": sum(after.values()) - sum(before.get(t, 0) for t in after),
                "commits_per_delta": round((sum(after.values()) - sum(before.get(t, 0) for t in after))
                                           / max(1, len(landed)), 2),
                "spark_round_trips": trips.total,
                "steps": {k: round(v, 2) for k, v in step_seconds(instance, runs).items()},
                "peak_memory_mib": mem.peak.to_dict(),
                "plain_script": {"rows": plain_rows, "seconds": round(plain_s, 2)},
                "rows_per_s_ratio_vs_plain": round((rows / seconds) / (plain_rows / plain_s), 3) if plain_rows else None,
            }
            floor_rows, floor_s = floor_script(bootstrap, fmt, topics["backlog"], sealed, floor_decoders["backlog"])
            res["backlog"]["floor"] = {"rows": floor_rows, "seconds": round(floor_s, 2)}
            res["backlog"]["rows_per_s_ratio_vs_floor"] = (
                round((rows / seconds) / (floor_rows / floor_s), 3) if floor_rows else None)
            ice_rows, ice_s = iceberg_script(engine.spark, bootstrap, fmt, topics["backlog"], sealed,
                                             script_decoders["backlog"])
            res["backlog"]["iceberg_script"] = {"rows": ice_rows, "seconds": round(ice_s, 2)}
            res["backlog"]["rows_per_s_ratio_vs_iceberg_script"] = (
                round((rows / seconds) / (ice_rows / ice_s), 3) if ice_rows else None)
            res["backlog_equal"] = lake_equals_truth(spark, layout, bootstrap, ledger, fmt, sources["backlog"],
                                                     backlog_story)
            print(f"{fmt} backlog: {res['backlog']}", flush=True)
    warm = res["steady"][1:] or res["steady"]
    with_rows = [e for e in warm if e["rows"] and e["plain_rows"]]
    res["summary"] = {
        "median_close_to_landed_s_warm": round(statistics.median(e["close_to_landed_s"] for e in warm), 2)
        if warm else None,
        "median_rows_per_delta_warm": statistics.median(e["rows"] for e in warm) if warm else None,
        "median_commits_per_delta": statistics.median(e["commits"] / max(1, len(e["landed"])) for e in warm)
        if warm else None,
        "median_steady_ratio_vs_plain": round(statistics.median(
            (e["rows"] / e["close_to_landed_s"]) / (e["plain_rows"] / e["plain_seconds"]) for e in with_rows), 3)
        if with_rows else None,
        "backlog_ratio_vs_plain": res["backlog"].get("rows_per_s_ratio_vs_plain"),
        "median_steady_ratio_vs_floor": round(statistics.median(
            (e["rows"] / e["close_to_landed_s"]) / (e["floor_rows"] / e["floor_seconds"]) for e in with_rows), 3)
        if with_rows else None,
        "backlog_ratio_vs_floor": res["backlog"].get("rows_per_s_ratio_vs_floor"),
        "median_steady_ratio_vs_iceberg_script": round(statistics.median(
            e["iceberg_script_seconds"] / e["close_to_landed_s"] for e in with_rows), 3) if with_rows else None,
        "backlog_ratio_vs_iceberg_script": res["backlog"].get("rows_per_s_ratio_vs_iceberg_script"),
        "backlog_commits_per_delta": res["backlog"].get("commits_per_delta"),
        "all_ok": all(e["ok"] for e in res["steady"]) and res["backlog"].get("ok", True),
        "all_equal": res["steady_equal"] and res.get("backlog_equal", True),
        "steady_peak_memory_mib": max_peak(peaks).to_dict() if peaks else None,
        "backlog_peak_memory_mib": res["backlog"].get("peak_memory_mib"),
    }
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default="qlik,dataworks,datastream")
    ap.add_argument("--rows", type=int, default=5000, help="row changes per delta, about")
    ap.add_argument("--deltas", type=int, default=4, help="deltas landed one at a time (the first one warms up)")
    ap.add_argument("--backlog", type=int, default=10, help="deltas then landed by one sync")
    ap.add_argument("--max-per-run", type=int, default=SensorConfig().max_deltas_per_run,
                    help="sensor.max_deltas_per_run (default: deltaport's)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--trace-round-trips", type=int, default=0, metavar="N",
                    help="print each steady delta's N busiest call sites of Spark round trips")
    ap.add_argument("--timeline", action="store_true",
                    help="print every Spark round trip of each steady delta: start, end, thread, call site")
    ap.add_argument("--spark-conf", type=spark_conf_pair, action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the embedded Spark server over deltaport's defaults (repeatable), "
                         "e.g. spark.sql.codegen.wholeStage=true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "dagster_streams.json")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="deltaport-dagster-stream-bench-"))
    os.environ["DAGSTER_HOME"] = str(work / "dagster")
    (work / "dagster").mkdir()
    res: dict = {"config": vars(args), "formats": {}}
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work, conf=dict(args.spark_conf)) as engine:
            res["engine_start_s"] = round(engine.start_seconds, 2)
            for fmt in [f for f in args.formats.split(",") if f]:
                print(f"{fmt} ...", flush=True)
                res["formats"][fmt] = bench_format(fmt, args, bootstrap, engine, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str) + "\n")
    print(f"\n{'format':11} {'steady s':>9} {'rows/delta':>10} {'backlog s/delta':>15} {'commits/delta':>13} "
          f"{'equal':>6}   rows/s ratios, steady | backlog: vs plain script, floor, Spark+Iceberg script")
    for fmt, r in res["formats"].items():
        s, b = r["summary"], r["backlog"]
        ratios = " | ".join(", ".join(f"{s.get(f'{scenario}_ratio_vs_{base}')!s}x" for base in ("plain", "floor",
                                                                                               "iceberg_script"))
                            for scenario in ("median_steady", "backlog"))
        print(f"{fmt:11} {s['median_close_to_landed_s_warm']!s:>9} {s['median_rows_per_delta_warm']!s:>10} "
              f"{b.get('seconds_per_delta', '-')!s:>15} {b.get('commits_per_delta', '-')!s:>13} "
              f"{s['all_equal']!s:>6}   {ratios}")
    print(f"wrote {args.out}")
    ok = all(r["summary"]["all_equal"] and r["summary"]["all_ok"] for r in res["formats"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
