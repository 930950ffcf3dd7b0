"""What a retirement pass's sweep of run files costs (platform_assets/run_files.py, issue 56).

A SQLite instance of its own holds `--held` runs (their records, added as Dagster adds them,
and each run's files as the local compute log manager and the event log leave them: a
`storage/<run_id>/compute_logs/` folder with `.out`, `.err` and `.complete`, and
`history/runs/<run_id>.db`), as a window keeps them. Timed, best of `--repeat`:
- `caught up`: the sweep of a pass once nothing is left behind (every entry a held run's);
- `backlog`: the first pass of a deployment with `--orphans` runs retired before the sweep
  existed (their folders and event files, older than the held runs'), which removes 500 of each;
  the folders are made again before each repeat.
Reported as ratios to `caught up` in the same run; never asserted.

    python bench/run_files_bench.py --held 2000 --orphans 100000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

import dagster as dg

from platform_assets.retirement import MAX_PER_PASS
from platform_assets.run_files import sweep_orphans


def _files(home: Path, run_id: str, mtime: float) -> None:
    """A run's files as Dagster 1.13 leaves them under `home`."""
    logs = home / "storage" / run_id / "compute_logs"
    logs.mkdir(parents=True)
    for ext in ("out", "err", "complete"):
        (logs / f"abcdefgh.{ext}").write_text("")
    (home / "history" / "runs" / f"{run_id}.db").write_text("")
    for path in (home / "storage" / run_id, home / "history" / "runs" / f"{run_id}.db"):
        os.utime(path, (mtime, mtime))


def _best(instance, repeat: int, before=None) -> tuple[float, int]:
    times, removed = [], 0
    for _ in range(repeat):
        if before is not None:
            before()
        started = time.perf_counter()
        removed = sweep_orphans(instance, limit=MAX_PER_PASS)
        times.append(time.perf_counter() - started)
    return min(times), removed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--held", type=int, default=2000)
    parser.add_argument("--orphans", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, dg.instance_for_test(temp_dir=tmp) as instance:
        home = Path(tmp)
        (home / "history" / "runs").mkdir(parents=True, exist_ok=True)
        for i in range(args.held):
            run = instance.add_run(dg.DagsterRun(job_name="delta_job", run_id=str(uuid.uuid4()),
                                                 status=dg.DagsterRunStatus.SUCCESS))
            _files(home, run.run_id, 2_000_000 + i)
        caught_up, none = _best(instance, args.repeat)
        orphans: list[str] = [str(uuid.uuid4()) for _ in range(args.orphans)]

        def refill() -> None:  # the backlog as it was: every orphan's files there again
            for i, run_id in enumerate(orphans):
                if not (home / "storage" / run_id).exists():
                    (home / "history" / "runs" / f"{run_id}.db").unlink(missing_ok=True)
                    _files(home, run_id, 1_000_000 + i)

        refill()
        backlog, removed = _best(instance, args.repeat, refill)
    print(f"held runs {args.held}, orphans {args.orphans}, best of {args.repeat}")
    print(f"caught up: {caught_up * 1000:.1f} ms, {none} removed")
    print(f"backlog:   {backlog * 1000:.1f} ms, {removed} removed ({backlog / caught_up:.1f}x caught up)")


if __name__ == "__main__":
    main()
