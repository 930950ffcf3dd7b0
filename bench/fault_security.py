"""Faults in figures (issue 11), security: deltaport against a Kafka that speaks SASL_SSL (SCRAM-SHA-512)
with ACLs, the embedded broker secured (resources/kafka/broker_security.py).

One secured broker of its own; the kill cases' Prostore story is published there by its admin. The
platform's user `deltaport` may read the topics under `secure.` (READ, DESCRIBE), nothing else. Its
password reaches deltaport only through the environment (`sasl.password: {env: ...}` in
deltaport.yaml), as a user deploys it. Cases, each a `deltaport sync` of a folder of its own:
- right credentials: the sync lands the story; the lake equals the truth at every delta;
- a wrong password: the sync fails within seconds (not the Kafka timeout) with an error that
  names the broker and the user;
- a topic the ACLs deny: the sync fails naming the topic and the user.
In every case the password given (right or wrong) appears nowhere: not in the sync's output, not
in any file of the case's folder (the Dagster instance: runs, event logs, compute logs; the lake;
the state stores), not in the Spark server's log, not in the broker's log.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.fault_kills import KillRow, case_folder, compare_with_truth, publish_story

USER = "deltaport"
PASSWORD_ENV = "DELTAPORT_KAFKA_PASSWORD"

# case -> (password given: "right" or "wrong", topics: "granted" or "denied")
SECURITY: dict[str, tuple[str, str]] = {
    "sasl-scram-right-credentials": ("right", "granted"),
    "sasl-scram-wrong-password": ("wrong", "granted"),
    "acl-topic-denied": ("right", "denied"),
}


@dataclass
class SecurityRow(KillRow):
    failed_with: str = ""  # the sync's error line, for the cases that must fail
    fail_seconds: float = 0.0
    secret_found_in: list = field(default_factory=list)


def run_security_cases(remote: str, work: Path, *, seed: int = 7, deltas: int = 4, extra_logs: tuple[Path, ...] = (),
                       cases: list[str] | None = None, timeout: float = 600) -> list[SecurityRow]:
    """Run `cases` (default: all) on one secured broker; `extra_logs`: more files that must not hold a
    password (the Spark server's log)."""
    import secrets

    from resources.kafka.broker import EmbeddedKafka
    from resources.kafka.broker_security import BrokerSecurity, grant_read

    password = secrets.token_urlsafe(18)
    security = BrokerSecurity(users={USER: password})
    rows = []
    with EmbeddedKafka(work_dir=work / "secured-broker", security=security) as broker:
        boot = broker.bootstrap_servers
        grant_read(boot, broker.client_config(), USER, "secure.")
        granted = publish_story(boot, seed, deltas=deltas, client_config=broker.client_config(), prefix="secure")
        denied = publish_story(boot, seed, deltas=deltas, client_config=broker.client_config(), prefix="private")
        kafka_properties = {k: v for k, v in broker.client_config(USER).items() if k != "sasl.password"}
        kafka_properties["sasl.password"] = {"env": PASSWORD_ENV}
        for case in cases or list(SECURITY):
            given, topics = SECURITY[case]
            secret = password if given == "right" else secrets.token_urlsafe(18)
            story = granted if topics == "granted" else denied
            row = SecurityRow(case, f"{given} password, {topics} topics")
            folder, catalog, env = case_folder(work, case, boot, story, remote, kafka_properties)
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "platform_assets.cli", "sync", "-c",
                                   str(folder / "deltaport.yaml")], cwd=folder, env={**env, PASSWORD_ENV: secret},
                                  capture_output=True, text=True, timeout=timeout)
            seconds = round(time.perf_counter() - began, 2)
            output = done.stdout + done.stderr
            if case == "sasl-scram-right-credentials":
                row.killed, row.recovered, row.recover_seconds = True, done.returncode == 0, seconds
                if not row.recovered:
                    row.problems.append(f"the sync failed (exit {done.returncode}): {output[-4000:]}")
                compare_with_truth(row, remote, catalog, folder / "lake", story.scenario)
            else:
                row.fail_seconds = seconds
                row.failed_with = next((line.strip() for line in output.splitlines()
                                        if "refused the credentials" in line or "may not read topic" in line), "")
                want = "refused the credentials of user" if given == "wrong" else "may not read topic"
                row.killed = row.recovered = True  # nothing to recover: the case is the clear failure
                if done.returncode == 0 or want not in row.failed_with or USER not in row.failed_with:
                    row.problems.append(f"expected a failure saying {want!r} for user {USER!r} "
                                        f"(exit {done.returncode}): {output[-4000:]}")
            row.secret_found_in = _holding(secret, output, [folder, *extra_logs, broker.data_dir / "logs"])
            if row.secret_found_in:
                row.problems.append(f"the password appears in {row.secret_found_in}")
            row.judge()
            rows.append(row)
    return rows


def _holding(secret: str, output: str, places: list[Path]) -> list[str]:
    """Where `secret` appears: "output", or the files under `places` that hold its bytes."""
    found = ["sync output"] if secret in output else []
    needle = secret.encode()
    for place in places:
        files = [place] if place.is_file() else sorted(p for p in place.rglob("*") if p.is_file())
        for path in files:
            try:
                if needle in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue
    return found


def print_security_row(row: SecurityRow) -> None:
    if row.failed_with or row.fail_seconds:
        print(f"{row.case:<34} {row.injected:<30} failed in {row.fail_seconds:>6.1f} s: {row.failed_with[:160]}; "
              f"password found in {row.secret_found_in or 'nothing'}, survived {row.survived}", flush=True)
    else:
        print(f"{row.case:<34} {row.injected:<30} landed in {row.recover_seconds:>6.1f} s, rows lost {row.rows_lost}, "
              f"duplicated {row.rows_duplicated}, deltas applied twice {row.deltas_applied_twice}; password found in "
              f"{row.secret_found_in or 'nothing'}, survived {row.survived}", flush=True)
    for p in row.problems:
        print(f"    {p}", flush=True)
