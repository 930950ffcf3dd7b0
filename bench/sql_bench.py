"""What a warm `deltaport sql` costs on the JVM-free engine and on Spark (issue 41: "`deltaport
sql` of a current-state aggregate and `deltaport read` of a 100k-row table with the JVM-free
engine <= 1.0 s wall each, the CLI's process start included").

The lake is bench/read_bench.py's: one warm Spark Connect server (bench/engine.py), datamart
`readbench`, table `wide` (a column of each Prostore type), delta 0 inserting `--rows` rows,
delta 1 updating 10%, deleting 1% and inserting 1%, landed with history by the platform's writers.

Then, as users run them (the CLI in a subprocess, process start included), `--repeat` times each:
- `deltaport sql` of a current-state aggregate (count, sum, min, max over the whole table), and
  of the same aggregate `FOR SYSTEM_TIME AS OF DELTA_NUM 0` (the history's union), on
  `--engine duckdb` and `--engine spark`; each answer checked against the truth;
- `deltaport read readbench.wide` (every row, jsonl) on the JVM-free engine (`--engine pyiceberg`)
  and on Spark, checked row for row (read_bench.check).
Reported: median seconds, the ratio Spark / JVM-free, the interpreter's start (`python -c pass`)
and the CLI's imports (`python -X importtime`, the sum of its top-level imports).

Then the warm DuckDB current-state aggregate on a quiet and on a busy machine (issue 56: "<= 1.0 s
with both cores busy beside it"): `--repeat` runs idle, then as many with `--busy-cores` processes
spinning on the CPU beside them (bench/busy_cores.py), each reported as its median, the median CPU
of a run (user + system: what the command itself costs, whatever else runs), and, from as
many runs of the same command under `-X importtime`, the imports (the sum of its top-level imports)
and the rest (each such run's seconds less its imports: the interpreter's start, the lake's
metadata, the scan, DuckDB, the output; medians).
`--baseline DIR`: the same command from another checkout (an untouched one, say) measured in the
same runs, alternating with this one, so the ratio this / baseline holds whatever the machine did.

    python bench/sql_bench.py [--rows 100000] [--repeat 5] [--busy-cores 2] [--baseline DIR]
                              [--engines duckdb spark]

Result: bench-results/sql.json and lines on stdout; `uptime` before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.busy_cores import busy_cores  # noqa: E402
from bench.engine import bench_engine  # noqa: E402
from bench.read_bench import (DM, TABLE, bench_config, check, import_seconds, lake_arguments, land,  # noqa: E402
                              python_start, save, story, uptime)
from platform_assets.cli.read_format import iso  # noqa: E402

AGGREGATE = (f"SELECT count(*) AS n, sum(i32) AS s, min(day) AS first_day, max(v) AS last_v "
             f"FROM {DM}.{TABLE}{{clause}}")


def cli(config: Path, args: list[str], env: dict, *, python=(), tree: Path = ROOT) -> tuple[float, str, str]:
    """(seconds, stdout, stderr) of `deltaport ARGS --config CONFIG`, run as users run it, from the
    checkout `tree` (its own modules first on the path)."""
    cmd = [sys.executable, *python, "-m", "platform_assets.cli", *args, "--config", str(config)]
    began = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**env, "PYTHONPATH": str(tree)}, cwd=tree)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - began, done.stdout, done.stderr


def aggregate_truth(truth: dict) -> dict:
    rows = list(truth.values())
    present = [r for r in rows if r["i32"] is not None]
    return {"n": len(rows), "s": sum(r["i32"] for r in present),
            "first_day": iso(min(r["day"] for r in rows if r["day"] is not None)),
            "last_v": max(r["v"] for r in rows if r["v"] is not None)}


def timed(config: Path, args: list[str], env: dict, repeat: int, verify) -> dict:
    times = []
    for _ in range(repeat):
        seconds, out, _ = cli(config, args, env)
        verify(out)
        times.append(round(seconds, 3))
    _, out, err = cli(config, args, env, python=("-X", "importtime"))
    verify(out)
    return {"seconds": times, "median_s": statistics.median(times), "imports_s": round(import_seconds(err), 3)}


def idle_and_busy(config: Path, args: list[str], env: dict, opts, verify) -> dict:
    """`args` (one command) idle, then with `opts.busy_cores` cores kept busy: from this checkout
    and `opts.baseline` (if given) in turn, `opts.repeat` runs each, then as many with `-X importtime`."""
    trees = {"this": ROOT, **({"baseline": opts.baseline} if opts.baseline else {})}
    res: dict = {}
    for load, cores in (("idle", 0), ("busy", opts.busy_cores)):
        if load == "busy" and not cores:
            continue
        times: dict[str, list[float]] = {name: [] for name in trees}
        imports: dict[str, list[float]] = {name: [] for name in trees}
        rest: dict[str, list[float]] = {name: [] for name in trees}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        with busy_cores(cores):
            for _ in range(opts.repeat):
                for name, tree in trees.items():  # alternating: what the machine does weighs on both
                    before = children_cpu()  # the burners are reaped after the block: not counted
                    seconds, out, _ = cli(config, args, env, tree=tree)
                    cpu[name].append(children_cpu() - before)
                    verify(out)
                    times[name].append(round(seconds, 3))
            for _ in range(opts.repeat):
                for name, tree in trees.items():
                    seconds, out, err = cli(config, args, env, python=("-X", "importtime"), tree=tree)
                    verify(out)
                    imports[name].append(import_seconds(err))
                    rest[name].append(seconds - imports[name][-1])
        for name, tree in trees.items():
            res[f"{load} {name}"] = {"tree": str(tree), "busy_cores": cores, "seconds": times[name],
                                     "median_s": round(statistics.median(times[name]), 3),
                                     "cpu_s": round(statistics.median(cpu[name]), 3),
                                     "imports_s": round(statistics.median(imports[name]), 3),
                                     "rest_s": round(statistics.median(rest[name]), 3)}
        if "baseline" in trees:
            res[f"{load} this / baseline"] = {
                key: round(res[f"{load} this"][key] / res[f"{load} baseline"][key], 3) for key in ("median_s", "cpu_s")}
    return res


def children_cpu() -> float:
    """User + system seconds of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-sql-bench-"))
    res: dict = {"config": {k: str(v) for k, v in vars(args).items()}, "uptime": [uptime()], "runs": {}}
    print(res["uptime"][0], flush=True)
    deltas, truths = story(args.rows, args.seed)
    try:
        with bench_engine(work) as engine:
            land(engine.spark, deltas)
            config, env = bench_config(work, engine.url)
            res["python_start_s"] = round(python_start(env, args.repeat), 3)

            def same_aggregate(truth):
                def verify(out):
                    got = json.loads(out)
                    assert {k: float(v) if k == "s" else v for k, v in got.items()} == \
                        {k: float(v) if k == "s" else v for k, v in aggregate_truth(truth).items()}, got
                return verify

            res["current aggregate on duckdb, idle and busy"] = idle_and_busy(
                config, ["sql", AGGREGATE.format(clause=""), "--engine", "duckdb"], env, args, same_aggregate(truths[1]))
            print(f"busy: {res['current aggregate on duckdb, idle and busy']}", flush=True)
            for engine_name in args.engines:
                for label, clause, truth in (("current aggregate", "", truths[1]),
                                             ("as-of-delta-0 aggregate", " FOR SYSTEM_TIME AS OF DELTA_NUM 0", truths[0])):
                    key = f"sql {engine_name} {label}"
                    res["runs"][key] = timed(config, ["sql", AGGREGATE.format(clause=clause), "--engine", engine_name],
                                             env, args.repeat, same_aggregate(truth))
                    print(f"{key}: {res['runs'][key]}", flush=True)
            for engine_name in ("pyiceberg", "spark") if "spark" in args.engines else ("pyiceberg",):
                key = f"read {engine_name} {len(truths[1])} rows"
                res["runs"][key] = timed(config, ["read", f"{DM}.{TABLE}", "--engine", engine_name], env, args.repeat,
                                         lambda out: check(out, "jsonl", truths[1]))
                print(f"{key}: {res['runs'][key]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = res["runs"]
    if "spark" not in args.engines or "duckdb" not in args.engines:
        res["uptime"].append(uptime())
        return res
    res["ratios_spark_over_jvm_free"] = {
        "sql current aggregate": round(runs["sql spark current aggregate"]["median_s"]
                                       / runs["sql duckdb current aggregate"]["median_s"], 2),
        "read": round(runs[f"read spark {len(truths[1])} rows"]["median_s"]
                      / runs[f"read pyiceberg {len(truths[1])} rows"]["median_s"], 2)}
    res["uptime"].append(uptime())
    return res


def report(res: dict, out: Path) -> int:
    save(res, out)
    print(f"sql: python start {res['python_start_s']} s")
    for key, r in res["runs"].items():
        print(f"sql: {key}: median {r['median_s']} s of {r['seconds']}; imports {r['imports_s']} s; "
              "equal to the truth")
    if "ratios_spark_over_jvm_free" in res:
        print(f"sql: Spark / JVM-free: {res['ratios_spark_over_jvm_free']}")
    for key, r in res["current aggregate on duckdb, idle and busy"].items():
        print(f"sql: duckdb current aggregate, {key}: " + (str(r) if "seconds" not in r else
              f"median {r['median_s']} s of {r['seconds']}, CPU {r['cpu_s']} s; imports {r['imports_s']} s, "
              f"the rest {r['rest_s']} s "
              f"({r['busy_cores']} cores busy beside it; {r['tree']})"))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lake_arguments(ap, "sql.json")
    ap.set_defaults(repeat=5)
    ap.add_argument("--busy-cores", type=int, default=os.cpu_count() or 2,
                    help="processes spinning beside the busy runs (default: one per core; 0: no busy runs)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout whose `deltaport sql` runs beside this one's, for a ratio")
    ap.add_argument("--engines", nargs="+", default=["duckdb", "spark"], choices=["duckdb", "spark"],
                    help="the engines of the other measurements")
    args = ap.parse_args(argv)
    return report(run(args), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
