"""What keeping a change stream's history costs (issue 28): bench/history_bench.py's measure for a
Qlik Replicate (or DataWorks, Datastream) source, `history: true` against `history: false`.

Two platforms side by side on one warm Spark Connect server, each with its own topic, lake,
ledger and Dagster instance, fed the same emulated story (bench/dagster_stream_bench.py's
`story_for`, about `--rows` row changes a delta): two slices landed by one range run on each
side to warm the server's plans up (not measured), then `--deltas` slices published one at a time,
each landed by one `sync` (the sealing sensor's pass, then the run; the sides' order
alternates), then the rest of the story, about `--backlog` deltas' worth, published at once and
landed by one `sync` (range runs; deltas cut at about `--rows` rows by the sealing limit).
Reported: seconds of each and the ratio with history / without (goal: <= 1.3x), per steady
slice (median of the warm ones) and for the backlog, and the closed versions the history tables
hold. Both lakes, as of their last sealed delta, are compared with the story's truth
(resources/emulator/stream_oracle.py); a run with a wrong lake exits 1.

    python bench/stream_history_bench.py [--format qlik] [--deltas 6] [--rows 5000] [--backlog 10]

Results: bench-results/stream_history.json and lines on stdout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.dagster_stream_bench import lake_equals_truth, slices, story_for  # noqa: E402
from bench.engine import bench_engine  # noqa: E402
from bench.history_bench import (SIDES, add_side_by_side_args, history_rows, measure, report,  # noqa: E402
                                 side_instance, summary, timed_sync)
from platform_assets.config import SensorConfig, parse_config  # noqa: E402
from platform_assets.definitions import ledger_resource, resources_for  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.lake.layout import LakeLayout  # noqa: E402

# Slices of the story landed first by one range run on each side, not measured: a change stream's
# first range run pays for plans the server compiles once (its fold; with history, the versions
# between), which the side that goes first would pay alone.
WARM_UP = 2


def side_configs(args, name: str, topic: str, bootstrap: str, url: str, work: Path, lateness_s: float) -> dict:
    """{phase: config} of one side: the same source, topic, lake and state; steady slices seal
    whole (no row limit: the idle flush seals each at once), the backlog at about --rows rows."""
    source = {"name": args.format, "format": args.format, "topic": topic, "idle_seconds": 0, "max_seconds": 1e9,
              "history": name == "on", **({"lateness_seconds": lateness_s} if args.format == "datastream" else {})}
    return {phase: parse_config({
        "sources": [{**source, "max_rows": max_rows}],
        "kafka": {"bootstrap_servers": bootstrap}, "spark": {"remote": url},
        "lake": {"catalog": f"lake_{name}", "warehouse": str(work / name / "lake")},
        "state_dir": str(work / name / "state"),
        "sensor": {"max_deltas_per_run": args.max_per_run, "max_messages_per_tick": 200_000},
    }) for phase, max_rows in (("steady", 100 * args.rows), ("backlog", args.rows))}


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-stream-history-bench-"))
    story = story_for(args.format, args.rows * (WARM_UP + args.deltas + args.backlog), args.seed)
    parts = slices(story.messages, WARM_UP + args.deltas + args.backlog)
    res: dict = {"config": vars(args), "steady": [], "backlog": {}}
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work, conf={}) as engine:
            side = {}
            for name in SIDES:
                topic = f"bench.history.{args.format}.{name}.{os.getpid()}"
                create_topic(bootstrap, topic)
                cfgs = side_configs(args, name, topic, bootstrap, engine.url, work,
                                    getattr(story, "max_lateness_us", 0) / 1e6)
                side[name] = (cfgs, topic, side_instance(work, name), LakeLayout(f"lake_{name}"),
                              resources_for(cfgs["steady"])["spark"].get_session())

            def publish_to(name: str, msgs: list) -> None:
                publish(msgs, bootstrap, {args.format: side[name][1]})

            for name in SIDES:  # both sides' first range run, not measured (module docstring)
                publish_to(name, [m for part in parts[:WARM_UP] for m in part])
                res.setdefault("warm_up", {})[name] = timed_sync(side[name][0]["backlog"], side[name][2])
            steady = parts[WARM_UP:WARM_UP + args.deltas]
            measure(res, [(f"slice {i}", part) for i, part in enumerate(steady)],
                    [m for part in parts[WARM_UP + args.deltas:] for m in part], args.backlog, publish_to,
                    lambda name, phase: timed_sync(side[name][0][phase], side[name][2]))
            res["equal"] = {name: lake_equals_truth(side[name][4], side[name][3], bootstrap,
                                                    ledger_resource(side[name][0]["steady"]).get(), args.format,
                                                    args.format, story) for name in SIDES}
            res["history_rows"], res["history_rows_off"] = (history_rows(side[n][4], side[n][3], args.format)
                                                            for n in SIDES)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["summary"] = summary(res)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", choices=["qlik", "dataworks", "datastream"], default="qlik")
    ap.add_argument("--max-per-run", type=int, default=SensorConfig().max_deltas_per_run,
                    help="sensor.max_deltas_per_run (default: deltaport's)")
    add_side_by_side_args(ap, seed=7, out="stream_history.json")
    args = ap.parse_args(argv)
    return 0 if report(run(args), args.out, f"{args.format} history") else 1


if __name__ == "__main__":
    raise SystemExit(main())
