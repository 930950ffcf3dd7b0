"""What a warm `deltaport read` of a big table costs (issue 30: "a warm `deltaport read` of a
100k-row table <= 1.5 s"), and where the time goes.

One warm Spark Connect server (bench/engine.py: the embedded one, or $SPARK_REMOTE), one
datamart `readbench` whose table `wide` has a column of each Prostore type the emulator writes
(BIGINT, INT, INT32, BOOLEAN, FLOAT, DOUBLE, CHAR, VARCHAR, UUID, DATE, TIME, TIMESTAMP; some
nulls; text with commas, quotes, a newline and non-ASCII letters), landed through the platform's
own writers (changelog, increment, snapshot with history): delta 0 inserts `--rows` rows, delta 1
updates 10% of them, deletes 1% and inserts 1%.

Then `deltaport read readbench.wide` as users run it (the CLI in a subprocess, on the same
server), of the current state (delta 1) and `--as-of-delta 0` (answered by the history), in each
`--formats` and `--engines`, `--repeat` times each. Every output is parsed back with the standard
library (json, csv) and compared with the truth, row order included (a benchmark of wrong answers
is void).

Reported: seconds per read (median), and a split of a read: the interpreter's start (`python -c
pass`), the CLI's imports (`python -X importtime` of the same read: the sum of its top-level
imports), and, in this process once warm, the Spark read's own phases (`phases`: the session's
connect, lake metadata and plan, the query and transfer of its rows as Arrow, the order, the
formatting).

    python bench/read_bench.py [--rows 100000] [--repeat 3] [--formats jsonl csv] [--engines spark]

Result: bench-results/read.json and lines on stdout; `uptime` before and after.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine import bench_engine  # noqa: E402
from platform_assets.cli.read_format import iso  # noqa: E402

DM, TABLE = "readbench", "wide"
DDL = ("CREATE TABLE readbench.wide (id BIGINT NOT NULL, i INT, i32 INT32, flag BOOLEAN, f FLOAT, d DOUBLE, "
       "c CHAR(10), v VARCHAR(64), u UUID, day DATE, tod TIME, at TIMESTAMP, PRIMARY KEY (id)) DISTRIBUTED BY (id)")
COLUMNS = ("id", "i", "i32", "flag", "f", "d", "c", "v", "u", "day", "tod", "at")
WORDS = ("alpha", "beta", "Zürich", "東京", 'say "hi"', "a,b", "it's", "line\nbreak", "ёж", "x")
EPOCH = dt.datetime(1970, 1, 1)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def random_row(rng: random.Random, key: int) -> dict:
    """A row of canonical Python values (TIME as `datetime.time`, FLOAT rounded to 32 bits)."""
    def maybe(value):
        return None if rng.random() < 0.05 else value

    micros = rng.randrange(86_400_000_000)
    return {"id": key, "i": maybe(rng.randint(-(2**62), 2**62)), "i32": maybe(rng.randint(-(2**31), 2**31 - 1)),
            "flag": maybe(rng.random() < 0.5),
            "f": maybe(struct.unpack("f", struct.pack("f", rng.uniform(-1e6, 1e6)))[0]),
            "d": maybe(rng.choice([round(rng.uniform(-1e6, 1e6), 6), rng.uniform(-1, 1) * 1e-300, 1e16 + 2])),
            "c": maybe("".join(rng.choice("abcXYZ09ё") for _ in range(rng.randint(1, 10)))),
            "v": maybe(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))),
            "u": maybe(f"{rng.getrandbits(128):032x}"),
            "day": maybe(dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-700_000, 30_000))),
            "tod": maybe(dt.time(micros // 3_600_000_000, micros // 60_000_000 % 60, micros // 1_000_000 % 60,
                                 micros % 1_000_000)),
            "at": maybe(EPOCH + dt.timedelta(microseconds=rng.randint(-2**50, 2**52)))}


def story(rows: int, seed: int) -> tuple[list[list[tuple[dict, int]]], list[dict[int, dict]]]:
    """([delta 0's changes, delta 1's] as (row, sys_op)), [the truth after delta 0, after 1]."""
    rng = random.Random(seed)
    state = {k: random_row(rng, k) for k in range(rows)}
    deltas, truths = [[(r, 0) for r in state.values()]], [dict(state)]
    keys = list(state)
    rng.shuffle(keys)
    updated, deleted = keys[: rows // 10], keys[rows // 10: rows // 10 + rows // 100]
    changes = [(random_row(rng, k), 0) for k in updated] + [(state[k], 1) for k in deleted]
    changes += [(random_row(rng, k), 0) for k in range(rows, rows + rows // 100)]
    for row, op in changes:
        if op:
            state.pop(row["id"])
        else:
            state[row["id"]] = row
    deltas.append(changes)
    truths.append(dict(state))
    return deltas, truths


def land(spark, deltas) -> None:
    """Both deltas through the platform's writers, as a run lands them."""
    import pyarrow as pa

    from resources.codecs.backup import ChangelogRecord
    from resources.lake.layout import LakeLayout
    from resources.lake.prostore import land_changelog, land_increment
    from resources.lake.prostore_snapshot import apply_snapshots

    layout = LakeLayout("lake")
    for n, changes in enumerate(deltas):
        entities = land_changelog(spark, layout, DM, n, f"inc-{n}", [ChangelogRecord(0, TABLE, DDL)])

        def col(name, kind, convert=lambda v: v):
            return pa.array([None if r[name] is None else convert(r[name]) for r, _ in changes], kind)

        def micros(t: dt.time) -> int:
            return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond

        frame = pa.table({
            "id": col("id", pa.int64()), "i": col("i", pa.int64()), "i32": col("i32", pa.int32()),
            "flag": col("flag", pa.bool_()), "f": col("f", pa.float32()), "d": col("d", pa.float64()),
            "c": col("c", pa.string()), "v": col("v", pa.string()), "u": col("u", pa.string()),
            "day": col("day", pa.date32()), "tod": col("tod", pa.int64(), micros), "at": col("at", pa.timestamp("us")),
            "sys_op": pa.array([op for _, op in changes], pa.int32()),
            "_kafka_partition": pa.array([0] * len(changes), pa.int32()),
            "_kafka_offset": pa.array(range(len(changes)), pa.int64())})
        land_increment(spark, layout, DM, n, 1_700_000_000_000_000 + n, f"inc-{n}", entities, {TABLE: frame})
        apply_snapshots(spark, layout, DM, n)


def csv_form(value) -> str:
    """A truth value as a CSV field's text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(iso(value))


def check(text: str, fmt: str, truth: dict[int, dict]) -> None:
    """The output, parsed back by the standard library, is the truth, row for row, in primary-key
    order (dates and times as the documented ISO text: `read_format.iso`); else AssertionError."""
    want = [truth[k] for k in sorted(truth)]
    if fmt == "jsonl":
        got = [json.loads(line) for line in text.splitlines()]
        expected = [{c: iso(r[c]) for c in COLUMNS} for r in want]
    else:
        records = list(csv.reader(io.StringIO(text, newline="")))
        assert records[0] == list(COLUMNS), records[0]
        got = [dict(zip(COLUMNS, r)) for r in records[1:]]
        expected = [{c: csv_form(r[c]) for c in COLUMNS} for r in want]
    assert len(got) == len(expected), (fmt, len(got), len(expected))
    bad = next((i for i, (g, w) in enumerate(zip(got, expected)) if g != w), None)
    assert bad is None, (fmt, bad, got[bad], expected[bad])


def cli(config: Path, fmt: str, engine: str, delta: int | None, env: dict, *, python=()) -> tuple[float, str, str]:
    """(seconds, stdout, stderr) of `deltaport read readbench.wide`, run as users run it."""
    cmd = [sys.executable, *python, "-m", "platform_assets.cli", "read", f"{DM}.{TABLE}", "--format", fmt,
           "--engine", engine, "--config", str(config)]
    began = time.perf_counter()
    done = subprocess.run(cmd + (["--as-of-delta", str(delta)] if delta is not None else []), capture_output=True,
                          text=True, env=env, cwd=ROOT, check=True)
    return time.perf_counter() - began, done.stdout, done.stderr


def import_seconds(stderr: str) -> float:
    """The sum of the top-level imports `python -X importtime` reported (cumulative microseconds)."""
    top = re.findall(r"^import time:\s+\d+ \|\s+(\d+) \| (\S.*)$", stderr, re.M)
    return sum(int(us) for us, _ in top) / 1e6


def python_start(env: dict, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def phases(config: Path, fmt: str, engine: str, delta: int | None, repeat: int) -> dict | None:
    """The Spark read's phases in this process (imports done, a new session each time), median of
    `repeat`: connect (the session), landed (the last landed delta, for the current state), plan
    (the schema from the changelog and the state's DataFrame: lake metadata round trips), fetch
    (the query and the transfer of its rows as Arrow), order (canonical columns, the sort),
    format (the text, to memory). None for the PyIceberg engine, and for the code before the
    Arrow read (it has no `frame_as_of`)."""
    try:
        from resources.lake.read import frame_as_of
    except ImportError:
        return None
    if engine != "spark":
        return None
    from platform_assets.cli.arrow_format import write_csv, write_jsonl
    from platform_assets.cli.read_engines import SparkReader
    from platform_assets.config import load_config
    from resources.lake.arrow_order import by_key, canonical
    from resources.spark.session import close_sessions

    cfg = load_config(str(config))
    runs = []
    for _ in range(repeat):
        close_sessions(cfg.spark.remote)  # a session of its own, as the CLI's
        t = [time.perf_counter()]
        reader = SparkReader(cfg)
        t.append(time.perf_counter())
        n = reader.last_landed(DM, TABLE) if delta is None else delta
        t.append(time.perf_counter())
        entity, df = frame_as_of(reader.spark, reader.layout, DM, TABLE, n, last=reader.recorded.get((DM, TABLE)),
                                 mark=reader._mark(DM))
        t.append(time.perf_counter())
        arrow = df.toArrow()
        t.append(time.perf_counter())
        names = [c.name for c in entity.columns]
        table = by_key(canonical(arrow, names, times=[c.name for c in entity.columns if c.type == "time"]),
                       entity.primary_key)
        t.append(time.perf_counter())
        (write_jsonl if fmt == "jsonl" else write_csv)(table, io.BytesIO())
        t.append(time.perf_counter())
        runs.append([b - a for a, b in zip(t, t[1:])])
    names = ("connect", "landed", "plan", "fetch", "order", "format")
    return {name: round(statistics.median(r[i] for r in runs), 3) for i, name in enumerate(names)}


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="deltaport-read-bench-"))
    res: dict = {"config": {k: str(v) for k, v in vars(args).items()}, "uptime": [uptime()], "reads": {}}
    print(res["uptime"][0], flush=True)
    deltas, truths = story(args.rows, args.seed)
    try:
        with bench_engine(work) as engine:
            began = time.perf_counter()
            land(engine.spark, deltas)
            res["land_seconds"] = round(time.perf_counter() - began, 1)
            print(f"landed {len(truths[0])} rows (delta 0), {len(truths[1])} (delta 1) in {res['land_seconds']} s",
                  flush=True)
            config, env = bench_config(work, engine.url)
            res["python_start_s"] = round(python_start(env, args.repeat), 3)
            for engine_name in args.engines:
                for fmt in args.formats:
                    for label, delta in (("current", None), ("as_of_delta_0", 0)):
                        truth = truths[1] if delta is None else truths[0]
                        times = []
                        for _ in range(args.repeat):
                            seconds, out, _ = cli(config, fmt, engine_name, delta, env)
                            check(out, fmt, truth)
                            times.append(round(seconds, 3))
                        _, out, err = cli(config, fmt, engine_name, delta, env, python=("-X", "importtime"))
                        check(out, fmt, truth)
                        key = f"{engine_name} {fmt} {label}"
                        res["reads"][key] = {"rows": len(truth), "seconds": times,
                                             "median_s": statistics.median(times),
                                             "imports_s": round(import_seconds(err), 3),
                                             "phases": phases(config, fmt, engine_name, delta, args.repeat)}
                        print(f"read: {key}: {res['reads'][key]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["uptime"].append(uptime())
    return res


def bench_config(work: Path, url: str) -> tuple[Path, dict]:
    """(deltaport.yaml of the bench's lake in `work` on the server at `url`, the CLI's environment)."""
    config = work / "deltaport.yaml"
    config.write_text(json.dumps({
        "sources": [{"name": DM, "format": "prostore", "signal_topic": "s", "backup_topic": "b"}],
        "kafka": {"bootstrap_servers": "127.0.0.1:9"},  # never reached: the CLI reads the lake only
        "spark": {"remote": url},
        "lake": {"catalog": "lake", "type": "hadoop", "warehouse": str(work / "lake")},
        "state_dir": str(work / "state")}))
    return config, {**os.environ, "PYTHONPATH": str(ROOT)}


def save(res: dict, out: Path) -> None:
    """`res` as JSON in `out`; the closing `uptime` on stdout."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    print(res["uptime"][-1])


def lake_arguments(ap: argparse.ArgumentParser, result: str) -> None:
    """The options of a bench on this lake: its size, the repeats, the seed, where the result goes."""
    ap.add_argument("--rows", type=int, default=100_000, help="rows of delta 0 (delta 1 keeps as many)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command")
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / result)


def report(res: dict, out: Path) -> int:
    save(res, out)
    print(f"read: python start {res['python_start_s']} s")
    for key, r in res["reads"].items():
        split = f"; imports {r['imports_s']} s" + (f"; phases {r['phases']}" if r["phases"] else "")
        print(f"read: {key} ({r['rows']} rows): median {r['median_s']} s of {r['seconds']}{split}; equal to the truth")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lake_arguments(ap, "read.json")
    ap.add_argument("--formats", nargs="+", default=["jsonl", "csv"], choices=["jsonl", "csv"])
    ap.add_argument("--engines", nargs="+", default=["spark"], choices=["spark", "pyiceberg"])
    args = ap.parse_args(argv)
    return report(run(args), args.out)


if __name__ == "__main__":
    raise SystemExit(main())
