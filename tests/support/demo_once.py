"""`deltaport demo --once` as a user runs it, once for the test session (the `demo_once` fixture of
tests/conftest.py): its own embedded Kafka broker, the session's Spark server if $SPARK_REMOTE is
set (else its own), a fresh Iceberg lake; it lands a datamart, a backup-only datamart and one
change stream of each format and compares every delta with the emulator's truth.

It runs with $SPARK_CONNECT_LOG_LEVEL=error, so pyspark's Connect client logs every failed call
at ERROR from the first one (without it the client's logger is off until Dagster configures
logging): a "does it exist yet" asked by a failing query anywhere in the first landing shows up
as an ERROR line in its log (issue 31). The UI test looks at the Dagster instance it leaves,
test_clean_logs at its log and its lake.

Under pytest-xdist (`make test` runs two workers) the first worker that asks runs it and the other
waits on a file lock and reads the same folder (`shared_demo_once`): one demo per test run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

DELTAS = 2
# One line per source, delta and table: "<source> <delta> <table> <lake rows> <truth rows> yes|NO".
COUNTED = re.compile(r"^(\w+)\s+(\d+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(yes|NO)$", re.M)


@dataclass(frozen=True)
class DemoOnce:
    folder: Path  # the demo's folder: deltaport.yaml, workspace.yaml, dagster/ (the instance), lake/
    log: Path  # everything it printed, stdout and stderr
    deltas: int = DELTAS

    @property
    def config(self) -> Path:
        return self.folder / "deltaport.yaml"

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def error_lines(self) -> list[str]:
        return [line[:300] for line in self.text().splitlines() if re.search(r"\bERROR\b", line)]

    def counted(self) -> dict[str, dict[str, int]]:
        """{source: {table: lake rows}} of the last delta the demo compared per source, all equal."""
        out: dict[str, dict[str, int]] = {}
        for source, _, table, got, want, same in COUNTED.findall(self.text()):
            assert same == "yes" and got == want, (source, table, got, want)
            out.setdefault(source, {})[table] = int(got)
        return out


def tail(log: Path, lines: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def run_demo_once(folder: Path) -> DemoOnce:
    """`deltaport demo --once --deltas 2` with DELTAPORT_STATE_DIR=folder/.deltaport."""
    state, log = folder / ".deltaport", folder / "demo.log"
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "DELTAPORT_CONFIG")}
    env["DELTAPORT_STATE_DIR"] = str(state)
    env["SPARK_CONNECT_LOG_LEVEL"] = "error"
    cmd = [sys.executable, "-m", "platform_assets.cli", "demo", "--once", "--deltas", str(DELTAS)]
    started = time.monotonic()
    with open(log, "wb") as out:
        try:
            proc = subprocess.run(cmd, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=900)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`{' '.join(cmd[2:])}` did not finish in 900 s; {log}:\n{tail(log)}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"`{' '.join(cmd[2:])}` exited with {proc.returncode}; {log}:\n{tail(log)}", pytrace=False)
    print(f"demo --once --deltas {DELTAS}: {time.monotonic() - started:.0f} s")
    return DemoOnce(state / "demo", log)


def shared_demo_once(root: Path) -> DemoOnce:
    """The one demo of a run whose workers share `root`: run by the first caller, under a file lock;
    a later caller gets its folder, or the first caller's failure again (never a second demo)."""
    folder, failed = root / "demo", root / "demo.failed"
    with FileLock(str(root / "demo.lock")):
        if failed.exists():
            pytest.fail(failed.read_text(), pytrace=False)
        if (folder / "demo.done").exists():
            return DemoOnce(folder / ".deltaport" / "demo", folder / "demo.log")
        folder.mkdir(exist_ok=True)
        try:
            demo = run_demo_once(folder)
        except pytest.fail.Exception as e:
            failed.write_text(f"(the demo run by another worker) {e}")
            raise
        (folder / "demo.done").touch()
        return demo
