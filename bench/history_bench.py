"""What keeping Prostore's history costs (issue 28): the same deltas landed with `history: true` and
with `history: false`, through `sync` as users run it, on one warm Spark Connect server.

Two platforms side by side, each with its own topics, lake, delta index and Dagster instance,
fed the same emulated traffic: per steady delta, each platform's `sync` lands it (the order
alternates, so neither is always the one that finds the server warmer); then a backlog of
`--backlog` deltas, landed by one `sync` each (range runs). Reported: seconds of each, and the
ratio with history / without (goal: <= 1.3x), per steady delta (median) and for the backlog, with
the rows the history tables hold. Both lakes are checked against the emulator's truth.

    python bench/history_bench.py [--deltas 6] [--rows 5000] [--backlog 10]

Results: bench-results/history.json and lines on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from bench.dagster_bench import DM, bench_scenario, check, delta_batches  # noqa: E402
from bench.engine import bench_engine  # noqa: E402
from platform_assets.config import parse_config  # noqa: E402
from platform_assets.definitions import resources_for  # noqa: E402
from platform_assets.sync import sync  # noqa: E402
from resources.emulator.outgoing import BACKUP, SIGNAL  # noqa: E402
from resources.kafka.admin import create_topic  # noqa: E402
from resources.kafka.broker import kafka_bootstrap  # noqa: E402
from resources.kafka.publish import publish  # noqa: E402
from resources.lake.prostore import LakeLayout  # noqa: E402
from resources.lake.prostore_history import history_ident  # noqa: E402
from resources.spark.iceberg import table_exists  # noqa: E402

SIDES = ("on", "off")


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-history-bench-"))
    sc = bench_scenario(args)
    batches = delta_batches(sc.messages)
    res: dict = {"config": vars(args), "steady": [], "backlog": {}}
    try:
        with kafka_bootstrap() as bootstrap, bench_engine(work, conf={}) as engine:
            side = {}
            for name in SIDES:
                topics = {SIGNAL: f"bench.{name}.signal.{os.getpid()}", BACKUP: f"bench.{name}.backup.{os.getpid()}"}
                create_topic(bootstrap, topics[SIGNAL])
                create_topic(bootstrap, topics[BACKUP], partitions=3)
                cfg = parse_config({"datamarts": [{"name": DM, "signal_topic": topics[SIGNAL],
                                                   "backup_topic": topics[BACKUP], "history": name == "on"}],
                                    "kafka": {"bootstrap_servers": bootstrap}, "spark": {"remote": engine.url},
                                    "lake": {"catalog": f"lake_{name}", "warehouse": str(work / name / "lake")},
                                    "state_dir": str(work / name / "state")})
                (work / name / "dagster").mkdir(parents=True)
                instance = dg.DagsterInstance.local_temp(str(work / name / "dagster"))
                side[name] = (cfg, topics, instance, LakeLayout(f"lake_{name}"), resources_for(cfg)["spark"].get_session())

            def land(name: str) -> tuple[float, list[int]]:
                cfg, _, instance, _, _ = side[name]
                t0 = time.perf_counter()
                out = sync(cfg, instance, echo=lambda line: None)
                return time.perf_counter() - t0, [n for _, n in out.landed()]

            steady, backlog = batches[:args.deltas], batches[args.deltas:]
            for i, (n, msgs) in enumerate(steady):
                seconds = {}
                for name in (SIDES if i % 2 == 0 else SIDES[::-1]):
                    publish(msgs, bootstrap, side[name][1])
                    seconds[name], landed = land(name)
                    assert landed == [n], (name, landed, n)
                entry = {"delta": n, "on_s": round(seconds["on"], 2), "off_s": round(seconds["off"], 2),
                         "ratio": round(seconds["on"] / seconds["off"], 3)}
                res["steady"].append(entry)
                print(f"delta {n}: with history {entry['on_s']} s, without {entry['off_s']} s: {entry['ratio']}x",
                      flush=True)
            if backlog:
                seconds, landed = {}, {}
                for name in SIDES:
                    publish([m for _, msgs in backlog for m in msgs], bootstrap, side[name][1])
                    seconds[name], landed[name] = land(name)
                res["backlog"] = {"deltas": len(backlog), "on_s": round(seconds["on"], 2),
                                  "off_s": round(seconds["off"], 2), "ratio": round(seconds["on"] / seconds["off"], 3)}
                print(f"backlog of {len(backlog)}: with history {res['backlog']['on_s']} s, without "
                      f"{res['backlog']['off_s']} s: {res['backlog']['ratio']}x", flush=True)
            last = batches[-1][0]
            res["equal"] = {name: check(side[name][4], side[name][3], sc, last) for name in SIDES}
            spark, layout = side["on"][4], side["on"][3]
            res["history_rows"] = {t: spark.table(history_ident(layout, DM, t)).count()
                                   for t in sc.truth[DM][last] if table_exists(spark, history_ident(layout, DM, t))}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    warm = res["steady"][1:] or res["steady"]
    res["summary"] = {"median_steady_ratio": statistics.median(e["ratio"] for e in warm) if warm else None,
                      "backlog_ratio": res["backlog"].get("ratio")}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deltas", type=int, default=6, help="deltas landed one at a time (the first one warms up)")
    ap.add_argument("--backlog", type=int, default=10, help="deltas then landed by one sync")
    ap.add_argument("--rows", type=int, default=5000, help="row changes per delta")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "history.json")
    args = ap.parse_args(argv)
    res = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2, default=str))
    print(f"history: steady delta {res['summary']['median_steady_ratio']}x (median, warm), backlog "
          f"{res['summary']['backlog_ratio']}x, with/without; history rows {res['history_rows']}; "
          f"equal to the truth {res['equal']}")
    return 0 if all(res["equal"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
