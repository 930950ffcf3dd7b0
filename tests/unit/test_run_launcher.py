"""The run launcher's worker check (platform_assets/run_launcher.py) on a /proc of our making, and
on the real one for this very process."""

import os
import time

from platform_assets.run_launcher import worker_alive

BOOT = 1_700_000_000


def _proc(tmp_path, pid, state="S", started_ticks=100 * os.sysconf("SC_CLK_TCK")):
    (tmp_path / "stat").write_text(f"cpu  1 2 3\nbtime {BOOT}\n")
    if pid is not None:
        (tmp_path / str(pid)).mkdir()
        rest = [state] + ["0"] * 18 + [str(started_ticks)] + ["0"] * 10
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (python (run) worker) " + " ".join(rest) + "\n")
    return tmp_path


def test_a_live_worker_that_started_the_run_is_alive(tmp_path):
    assert worker_alive(42, BOOT + 105, _proc(tmp_path, 42)) is True


def test_a_gone_worker_is_dead(tmp_path):
    assert worker_alive(42, BOOT + 105, _proc(tmp_path, None)) is False


def test_a_zombie_worker_is_dead(tmp_path):
    assert worker_alive(42, BOOT + 105, _proc(tmp_path, 42, state="Z")) is False


def test_a_pid_reused_by_a_later_process_is_dead(tmp_path):
    later = 500 * os.sysconf("SC_CLK_TCK")  # started 500 s after boot, the run at 105 s
    assert worker_alive(42, BOOT + 105, _proc(tmp_path, 42, started_ticks=later)) is False


def test_without_proc_it_cannot_tell(tmp_path):
    assert worker_alive(42, BOOT + 105, tmp_path / "no-proc") is None


def test_this_process_is_alive_on_the_real_proc():
    assert worker_alive(os.getpid(), time.time()) is True
