"""A throwaway PostgreSQL server for the tests: Debian's `postgresql` binaries (the Makefile
installs the package when missing), a new cluster in a temporary folder, loopback only, password
authentication (scram), stopped and removed at the end. PostgreSQL refuses to run as root, so as
root the server runs as the package's `postgres` user (runuser). With
$DELTAPORT_TEST_POSTGRES_URL set, that server is used instead and nothing is started.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from resources.net import free_port

PASSWORD_ENV = "DELTAPORT_TEST_PG_PASSWORD"
URL_ENV = "DELTAPORT_TEST_POSTGRES_URL"


@dataclass
class PostgresServer:
    """A reachable server: `url` names a superuser without its password (in $PASSWORD_ENV)."""

    url: str
    password: str | None
    data_dir: Path | None = None
    run_as: list[str] | None = None
    bindir: Path | None = None
    options: str = ""  # the server's start options (port, socket folder, settings)

    def database(self, prefix: str = "dp") -> str:
        """A new empty database; its URL (no password)."""
        import psycopg2

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        conn = psycopg2.connect(self.url, password=self.password)
        try:
            conn.autocommit = True
            conn.cursor().execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url.rsplit("/", 1)[0] + "/" + name

    def dagster_env(self, url: str) -> dict[str, str]:
        """The environment deploy/dagster-postgres.yaml reads for a database URL of this server."""
        user, rest = url.split("://", 1)[1].split("@", 1)
        hostport, db = rest.split("/", 1)
        host, port = hostport.rsplit(":", 1)
        return {"DAGSTER_PG_HOST": host, "DAGSTER_PG_PORT": port, "DAGSTER_PG_DB": db, "DAGSTER_PG_USER": user,
                "DAGSTER_PG_PASSWORD": self.password or os.environ.get(PASSWORD_ENV, "")}

    def jdbc_url(self, url: str) -> str:
        """The JDBC address of a database URL of this server."""
        rest = url.split("@", 1)[-1]
        return f"jdbc:postgresql://{rest}"

    def restart(self, *, down_seconds: float = 2.0) -> None:
        """Stop the server (fast: every connection is cut, open transactions roll back), stay down
        `down_seconds` (connections are refused), start it again on the same port. A server of
        $DELTAPORT_TEST_POSTGRES_URL is not ours to restart: its connections are cut instead."""
        import time

        if self.data_dir is None:
            self.cut_connections()
            return
        pg_ctl = [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.data_dir / "data")]
        _run([*pg_ctl, "-m", "fast", "-w", "stop"])
        time.sleep(down_seconds)
        # pg_ctl restarts with the options of the last start (postmaster.opts) only via `restart`;
        # after a stop, `start` needs them again: the same port, socket folder and settings.
        _run([*pg_ctl, "-o", self.options, "-l", str(self.data_dir / "log"), "-w", "-t", "60", "start"])

    def cut_connections(self) -> int:
        """Terminate every other session on the server (what a failover or an idle-connection killer
        does to clients); the number cut."""
        import psycopg2

        conn = psycopg2.connect(self.url, password=self.password)
        try:
            conn.autocommit = True
            cur = conn.cursor()
            cur.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
            return cur.fetchone()[0]
        finally:
            conn.close()

    def stop(self) -> None:
        if self.data_dir is None:
            return
        subprocess.run([*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.data_dir / "data"), "-m",
                        "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def find_bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).resolve().parent
    raise RuntimeError("PostgreSQL's initdb not found: `make test` installs Debian's postgresql package; "
                       f"or set {URL_ENV} to a server's URL (password in ${PASSWORD_ENV})")


def start_postgres() -> PostgresServer:
    """The server of $DELTAPORT_TEST_POSTGRES_URL, else a new local one (see the module doc)."""
    if os.environ.get(URL_ENV):
        return PostgresServer(os.environ[URL_ENV], os.environ.get(PASSWORD_ENV))
    bindir = find_bindir()
    run_as: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="deltaport-pg-"))
    if os.geteuid() == 0:
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(work, "postgres")
    os.chmod(work, 0o755)
    password = secrets.token_hex(12)
    pwfile = work / "pw"
    pwfile.write_text(password + "\n")
    if run_as:
        shutil.chown(pwfile, "postgres")
    user = "deltaport"
    _run([*run_as, str(bindir / "initdb"), "-D", str(work / "data"), "-U", user, "--auth=scram-sha-256",
          f"--pwfile={pwfile}", "--no-sync", "-E", "UTF8", "--locale=C"])
    port = free_port()
    opts = (f"-p {port} -k {work} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
            "-c full_page_writes=off -c max_connections=200")
    _run([*run_as, str(bindir / "pg_ctl"), "-D", str(work / "data"), "-o", opts, "-l", str(work / "log"),
          "-w", "-t", "60", "start"])
    return PostgresServer(f"postgresql://{user}@127.0.0.1:{port}/postgres", password, work, run_as, bindir, opts)


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")


