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
from collections.abc import Callable
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
from resources.lake.layout import LakeLayout  # noqa: E402

SIDES = ("on", "off")


def timed_sync(cfg, instance) -> tuple[float, list[int]]:
    """(seconds, deltas landed) of one `sync` pass, as `deltaport sync` runs it."""
    t0 = time.perf_counter()
    out = sync(cfg, instance, echo=lambda line: None)
    return time.perf_counter() - t0, [n for _, n in out.landed()]


def side_instance(work: Path, name: str) -> dg.DagsterInstance:
    """A side's own Dagster instance (its runs and their storage apart from the other side's)."""
    (work / name / "dagster").mkdir(parents=True)
    return dg.DagsterInstance.local_temp(str(work / name / "dagster"))


def history_rows(spark, layout: LakeLayout, source: str) -> dict[str, int]:
    """{table: closed versions its history table holds} of every history table of `source`."""
    namespace = f"{layout.catalog}.{source}_history"
    if not spark.catalog.databaseExists(namespace):
        return {}
    return {r.tableName: spark.table(f"{namespace}.{r.tableName}").count()
            for r in spark.sql(f"SHOW TABLES IN {namespace}").collect()}


def measure(res: dict, steady: list[tuple[str, list]], backlog: list | None, backlog_deltas: int,
            publish_to: Callable[[str, list], None], land: Callable[[str, str], tuple[float, list[int]]]) -> None:
    """The two sides fed the same traffic: each steady slice (label, messages) published to a side
    and landed by `land(side, "steady")`, the sides' order alternating; then the backlog's messages
    at once, landed by `land(side, "backlog")`. Entries with seconds and the ratio on / off go to
    `res["steady"]` and `res["backlog"]`; both sides must land the same deltas."""
    for i, (label, msgs) in enumerate(steady):
        seconds, landed = {}, {}
        for name in (SIDES if i % 2 == 0 else SIDES[::-1]):
            publish_to(name, msgs)
            seconds[name], landed[name] = land(name, "steady")
        if not landed["on"] or landed["on"] != landed["off"]:
            raise RuntimeError(f"{label}: the sides landed different deltas: {landed}")
        entry = {"slice": label, "landed": landed["on"], "on_s": round(seconds["on"], 2),
                 "off_s": round(seconds["off"], 2), "ratio": round(seconds["on"] / seconds["off"], 3)}
        res["steady"].append(entry)
        print(f"{label} (deltas {entry['landed']}): with history {entry['on_s']} s, without {entry['off_s']} s: "
              f"{entry['ratio']}x", flush=True)
    if backlog:
        seconds, landed = {}, {}
        for name in SIDES:
            publish_to(name, backlog)
            seconds[name], landed[name] = land(name, "backlog")
        if landed["on"] != landed["off"]:
            raise RuntimeError(f"the backlog: the sides landed different deltas: {landed}")
        res["backlog"] = {"deltas": len(landed["on"]) or backlog_deltas, "on_s": round(seconds["on"], 2),
                          "off_s": round(seconds["off"], 2), "ratio": round(seconds["on"] / seconds["off"], 3)}
        print(f"backlog of {res['backlog']['deltas']}: with history {res['backlog']['on_s']} s, without "
              f"{res['backlog']['off_s']} s: {res['backlog']['ratio']}x", flush=True)


def summary(res: dict) -> dict:
    """The median ratio of the warm steady slices (the first warms up) and the backlog's."""
    warm = res["steady"][1:] or res["steady"]
    return {"median_steady_ratio": statistics.median(e["ratio"] for e in warm) if warm else None,
            "backlog_ratio": res["backlog"].get("ratio")}


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
                side[name] = (cfg, topics, side_instance(work, name), LakeLayout(f"lake_{name}"),
                              resources_for(cfg)["spark"].get_session())

            def publish_to(name: str, msgs: list) -> None:
                publish(msgs, bootstrap, side[name][1])

            steady, backlog = batches[:args.deltas], batches[args.deltas:]
            measure(res, [(f"delta {n}", msgs) for n, msgs in steady],
                    [m for _, msgs in backlog for m in msgs] if backlog else None, len(backlog), publish_to,
                    lambda name, phase: timed_sync(side[name][0], side[name][2]))
            assert [e["landed"] for e in res["steady"]] == [[n] for n, _ in steady], res["steady"]
            last = batches[-1][0]
            res["equal"] = {name: check(side[name][4], side[name][3], sc, last) for name in SIDES}
            res["history_rows"], res["history_rows_off"] = (history_rows(side[n][4], side[n][3], DM) for n in SIDES)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["summary"] = summary(res)
    return res


def add_side_by_side_args(ap: argparse.ArgumentParser, *, seed: int, out: str) -> None:
    """The options the side-by-side benchmarks take (traffic size, seed, result file): both history
    benchmarks' and the object store's (bench/objstore_bench.py, with smaller defaults)."""
    ap.add_argument("--deltas", type=int, default=6, help="deltas landed one at a time (the first one warms up)")
    ap.add_argument("--backlog", type=int, default=10, help="deltas' worth then landed by one sync")
    ap.add_argument("--rows", type=int, default=5000, help="row changes per delta, about")
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / out)


def report(res: dict, out: Path, label: str) -> bool:
    """Writes `res` to `out` and its line to stdout; whether both lakes equal the truth and only
    the side with history kept versions."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    print(f"{label}: steady delta {res['summary']['median_steady_ratio']}x (median, warm), backlog "
          f"{res['summary']['backlog_ratio']}x, with/without; history rows {res['history_rows']} (without: "
          f"{res['history_rows_off'] or 'none'}); equal to the truth {res['equal']}")
    kept, kept_off = sum(res["history_rows"].values()), sum(res["history_rows_off"].values())
    return all(res["equal"].values()) and kept > 0 and kept_off == 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_side_by_side_args(ap, seed=11, out="history.json")
    args = ap.parse_args(argv)
    return 0 if report(run(args), args.out, "history") else 1


if __name__ == "__main__":
    raise SystemExit(main())
