"""Faults in figures (issue 11), PostgreSQL: the server that holds a deployment's shared state (the
state store: delta index, change-stream ledger, sync cursors; and the Dagster instance: runs,
events, partitions) restarted in the middle of a `deltaport sync`.

The restart cases' shape (bench/fault_restarts.py): the first `sync` pauses itself at a failpoint
(SIGSTOP), the server is stopped fast (every connection cut, open transactions rolled back),
stays down two seconds and comes back on the same port; then the sync goes on (SIGCONT) with
its connections gone. Checked: it ends within a bound, landing the story or failing with an
error that names the state store or the instance; the second `sync` lands everything, and the
lake equals the truth as in the kills (nothing lost, nothing twice).
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from bench.fault_kills import KillRow, KillStory
from bench.fault_restarts import _run

# case -> the failpoint where the sync pauses while the server restarts
POSTGRES_CASES: dict[str, str] = {
    "postgres-restarted-in-ingest-tick": "ingest.read@10=pause",  # the delta index half written
    # A run's events half written: the step reported its first assets and works on the snapshot.
    # Not `snapshot.merge@2` (a MERGE thread's point): the step's main thread may be inside one of
    # Dagster's event writes then, whose transaction a restart cuts (Dagster's storage does not
    # retry it: that run fails, and the next tick lands the delta; docs/operating.md).
    "postgres-restarted-in-run": "step.phase1_reported=pause",
}

ROOT = Path(__file__).resolve().parents[1]


def on_postgres(server) -> callable:
    """A `configure` for the restart harness: the case's state store and Dagster instance in new
    databases of `server` (tests/support/postgres.PostgresServer), passwords from the environment."""
    from tests.support.postgres import PASSWORD_ENV

    def configure(folder: Path, env: dict) -> dict:
        config = folder / "deltaport.yaml"
        raw = yaml.safe_load(config.read_text())
        raw["state"] = {"url": server.database("state"), "password": {"env": PASSWORD_ENV}}
        config.write_text(yaml.safe_dump(raw))
        home = folder / "dagster-home"
        home.mkdir()
        (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster-postgres.yaml").read_text())
        return {**env, PASSWORD_ENV: server.password or os.environ.get(PASSWORD_ENV, ""), "DAGSTER_HOME": str(home),
                **server.dagster_env(server.database("dagster"))}

    return configure


def run_postgres_case(bootstrap: str, remote: str, story: KillStory, case: str, work: Path, server, *,
                      timeout: float = 600, fail_within: float = 120) -> KillRow:
    """One case on `server` (a PostgresServer this suite may restart) and the shared engine."""
    return _run(bootstrap, story, case, POSTGRES_CASES[case], work, lambda _: server.restart(down_seconds=2.0),
                timeout, fail_within, remote=remote, configure=on_postgres(server))
