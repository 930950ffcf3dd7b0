"""`deltaport sql` run as its own process runs without Python's cyclic garbage collector and ends
with what it made frozen (platform_assets/cli/common.py `short_lived_collector`: the collector's
passes over the imported libraries were a fifth of the command's CPU); the same `main` called in a
caller's process (tests, notebooks), and the commands that run long, keep the collector as it was.
Checked in a fresh interpreter: freezing is for the whole process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def test_sql_in_its_own_process_runs_without_the_collector_and_ends_frozen():
    seen = _run("""
        import gc, sys
        from platform_assets.cli import main, sql_cmd
        seen = []
        sql_cmd.run = lambda args: seen.append(gc.isenabled()) or 0  # registered by main, as the command
        assert main(["sql", "SELECT 1"]) == 0  # a caller's process: its collector left alone
        print(seen[-1], gc.get_freeze_count())
        sys.argv = ["deltaport", "sql", "SELECT 1"]
        assert main() == 0  # the process is the command's
        print(seen[-1], gc.isenabled(), gc.get_freeze_count() > 0)
    """)
    assert seen == ["True", "0", "False", "True", "True"]


def test_a_long_command_in_its_own_process_keeps_the_collector():
    seen = _run("""
        import gc, sys
        from platform_assets.cli import main, status_cmd
        seen = []
        status_cmd.run = lambda args: seen.append(gc.isenabled()) or 0
        sys.argv = ["deltaport", "status"]
        assert main() == 0
        print(seen[-1], gc.get_freeze_count())
    """)
    assert seen == ["True", "0"]
