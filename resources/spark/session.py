"""Spark with Apache Iceberg through Spark Connect: the server's settings, and client sessions.

Data flow: `ensure_iceberg_jars()` (Maven, cached) -> `server_conf()` (a plain dict, no JVM:
what the Spark Connect server starts with) -> a server (`resources.spark.server`, or a
user's cluster at any ``sc://`` address) -> `connect()` (a client session with the catalog
registered).

What this module guarantees:

* Iceberg's Spark runtime comes from our Maven cache and is passed to the server with
  ``spark.jars``; Ivy (``spark.jars.packages``) is never used. The runtime is built for one
  Spark minor, so a pyspark of another minor is refused up front with a clear `SparkSessionError`.
* One Iceberg catalog is registered under `CatalogConfig.name` (default ``lake``, a Hadoop
  catalog whose warehouse ``./lake`` is made absolute here, so a later ``chdir`` cannot move
  the lake), in the server's settings and again in every client session: catalogs are
  session settings in Spark, so two clients of one server may each name their own (tests do).
  REST, JDBC and Hive catalogs are the same mapping onto ``spark.sql.catalog.<name>.*``.
* Small-machine defaults (4 shuffle partitions, no UI, UTC session time zone, Arrow on, WARN
  logs, local masters bound to loopback); anything in `conf` wins over them. The embedded
  server's `file:` paths go through deltaport's local file system (`local_fs.py`: Hadoop's,
  without a ``chmod`` process per file written).
* `connect()` gives one session per (address, server incarnation, catalog) and process, reused
  while its server lives; a server that was restarted gets a new session, so a long-lived
  process (the demo, `sync --loop`, a test session) survives a server restart. A server without
  Iceberg's SQL extensions (static: fixed when it starts) is refused with a message saying how
  to start one.

Nothing here imports Dagster; pyspark's Connect client is imported only when a session is built.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from resources.errors import DeltaportError
from resources.spark.codegen import DEFAULT_FROM_ROWS, FROM_ROWS_KEY
from resources.spark.jars import ICEBERG_RUNTIME_ARTIFACT, ICEBERG_VERSION, ensure_iceberg_jars
from resources.net import answers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ICEBERG_EXTENSIONS",
    "SPARK_DEFAULTS",
    "CatalogConfig",
    "CatalogType",
    "SparkSessionError",
    "catalog_conf",
    "check_pyspark_version",
    "close_sessions",
    "local_checkpoint",
    "connect",
    "embedded_server_conf",
    "server_conf",
]

CatalogType = Literal["hadoop", "rest", "jdbc", "hive"]
CATALOG_TYPES: tuple[str, ...] = ("hadoop", "rest", "jdbc", "hive")
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"
SUPPORTED_SPARK_MINOR = "4.1"  # the "4.1" in iceberg-spark-runtime-4.1_2.13

# Defaults for 2 cores and a few GiB; every one can be overridden through `conf`.
SPARK_DEFAULTS: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # progress bars would garble Dagster's captured logs
    "spark.driver.memory": "4g",  # in local mode the driver is the executor of every run
    "spark.sql.session.timeZone": "UTC",  # Prostore timestamps carry no zone and mean UTC
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.log.level": "WARN",
    # Rows a client sends (a small delta's decoded Arrow) above 1 MiB are uploaded once and
    # cached on the server; inlined in the plan (below the 64 MiB default) they travel again
    # with every analysis of a frame built on them. Bytes, as pyspark's client parses it.
    "spark.sql.session.localRelationCacheThreshold": str(1 << 20),
    # Interpreted evaluation, no generated code. Generated code inlines long literals (a delta's
    # number, its date), so every delta's queries compile anew, and each compile resolves classes
    # through the Connect session's class loaders: 18% of the server's CPU in a profile of steady
    # deltas. Measured through Dagster on 2 cores (docs/performance.md, "Generated code"): steady 20k-row
    # deltas and backlogs cost 15-20% less server CPU; a 1.1M-row delta is about 14% slower.
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # ...except for a run that applies deltas to a table this big: there the per-row cost of
    # interpreting pays for the compiles many times over (resources/spark/codegen.py).
    FROM_ROWS_KEY: str(DEFAULT_FROM_ROWS),
}


class SparkSessionError(DeltaportError):
    """The Spark session could not be built as asked (bad catalog config, wrong pyspark, a
    server without the Iceberg extensions)."""


@dataclass(frozen=True)
class CatalogConfig:
    """An Iceberg catalog as Spark sees it: ``spark.sql.catalog.<name>.*``.

    `warehouse`: a folder or URI for tables' data and metadata. A path without a scheme is
    made absolute (relative to the working directory) when the session is built, for every type
    but ``rest``, whose warehouse is often a name the server resolves. `uri`: the REST endpoint,
    JDBC URL or Hive metastore thrift URI. `properties`: any other catalog property
    (``io-impl``, ``s3.endpoint``, ``jdbc.user``, ``cache-enabled``...), passed as they are.
    `secret_properties`: property -> name of the environment variable holding its value
    (``jdbc.password``, ``s3.secret-access-key``), read when the settings are built, so the
    secret never sits in a config file or in a Dagster resource's config.
    """

    name: str = "lake"
    type: CatalogType = "hadoop"
    warehouse: str | None = "./lake"
    uri: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    secret_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise SparkSessionError(f"catalog name must be letters, digits and '_', got {self.name!r}")
        if self.type not in CATALOG_TYPES:
            raise SparkSessionError(f"catalog type must be one of {CATALOG_TYPES}, got {self.type!r}")
        if self.type == "hadoop" and not self.warehouse:
            raise SparkSessionError("a hadoop catalog needs a warehouse folder")
        if self.type in ("rest", "jdbc") and not self.uri:
            raise SparkSessionError(f"a {self.type} catalog needs a uri")


def _absolute_warehouse(catalog: CatalogConfig) -> str | None:
    wh = catalog.warehouse
    if not wh or catalog.type == "rest" or "://" in wh or wh.startswith("file:"):
        return wh
    return str(Path(wh).expanduser().absolute())


def catalog_conf(catalog: CatalogConfig, *, secrets: bool = True) -> dict[str, str]:
    """The ``spark.sql.catalog.<name>*`` settings registering `catalog` (no JVM needed); without
    `secrets`, the secret properties are left out (the server's command line and state file: every
    client session sets them again with the rest)."""
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {prefix: ICEBERG_SPARK_CATALOG, f"{prefix}.type": catalog.type}
    warehouse = _absolute_warehouse(catalog)
    if warehouse:
        conf[f"{prefix}.warehouse"] = warehouse
    if catalog.uri:
        conf[f"{prefix}.uri"] = catalog.uri
    if catalog.type == "jdbc":
        # Spark 4.1 asks every catalog for views while resolving a table name; Iceberg's JDBC
        # catalog refuses unless its tables are at schema V1 (which it migrates to by itself).
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
    for key, value in catalog.properties.items():
        conf[f"{prefix}.{key}"] = str(value)
    for key, env in catalog.secret_properties.items() if secrets else ():
        if env not in os.environ:
            raise SparkSessionError(f"catalog {catalog.name!r} property {key}: environment variable {env} is not set")
        conf[f"{prefix}.{key}"] = os.environ[env]
    return conf


def server_conf(
    *,
    master: str,
    catalog: CatalogConfig,
    jars: list[Path],
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every Spark setting the Spark Connect server starts with, as a plain dict (pure: no JVM,
    no environment). Precedence: `SPARK_DEFAULTS` < Iceberg and catalog settings < `conf`; jars
    and SQL extensions given in `conf` are added to ours, not put in their place."""
    merged: dict[str, str] = {"spark.master": master, **SPARK_DEFAULTS}
    if master.startswith(("local", "spark://127.0.0.1:", "spark://localhost:")):
        # Keep the driver (and its block manager) on loopback: nothing outside (or only a
        # cluster on this machine's loopback) needs to reach it.
        merged["spark.driver.host"] = "127.0.0.1"
        merged["spark.driver.bindAddress"] = "127.0.0.1"
    merged["spark.sql.extensions"] = ICEBERG_EXTENSIONS
    merged.update(catalog_conf(catalog, secrets=False))
    extra = {str(k): str(v) for k, v in (conf or {}).items()}
    our_jars = [str(p) for p in jars]
    their_jars = [j for j in extra.pop("spark.jars", "").split(",") if j.strip()]
    merged["spark.jars"] = ",".join(dict.fromkeys(our_jars + their_jars))
    their_ext = [e for e in extra.pop("spark.sql.extensions", "").split(",") if e.strip()]
    merged["spark.sql.extensions"] = ",".join(dict.fromkeys([ICEBERG_EXTENSIONS, *their_ext]))
    merged.update(extra)
    return merged



def check_pyspark_version() -> None:
    import pyspark

    minor = ".".join(pyspark.__version__.split(".")[:2])
    if minor != SUPPORTED_SPARK_MINOR:
        raise SparkSessionError(
            f"{ICEBERG_RUNTIME_ARTIFACT} {ICEBERG_VERSION} is built for Spark {SUPPORTED_SPARK_MINOR}, "
            f"but pyspark is {pyspark.__version__}; change the artifact in resources/spark/pom.xml "
            "and jars.py, or install pyspark 4.1.x"
        )


def embedded_server_conf(*, master: str, catalog: CatalogConfig, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """`server_conf` with the Iceberg jars resolved (Maven, cached; `IcebergJarsError` if that
    fails), the pyspark version checked and deltaport's local file system (`local_fs.py`) under
    `conf`: what the embedded server starts with. A classpath in `conf` goes after ours."""
    from resources.spark.local_fs import local_fs_conf

    check_pyspark_version()
    ours = local_fs_conf(master)
    theirs = {str(k): str(v) for k, v in (conf or {}).items()}
    for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath"):
        if key in ours and theirs.get(key):
            theirs[key] = f"{ours[key]}:{theirs[key]}"
    return server_conf(master=master, catalog=catalog, jars=ensure_iceberg_jars(), conf={**ours, **theirs})


_sessions: dict[tuple[str, str, tuple], SparkSession] = {}
_sessions_lock = threading.Lock()

# How long a call waits for an unanswering server before it fails. pyspark's default policy
# waits up to ~10 minutes, right for a cluster behind a load balancer that restarts; the
# embedded server is on loopback, so it either answers at once or is gone (and `ensure()`
# starts a new one on the next session): fail within seconds instead.
EMBEDDED_RETRY_POLICY: Mapping[str, int] = {"max_retries": 4, "initial_backoff": 100, "max_backoff": 4000}


# How long a new session waits for a remote server that accepts no connection at all before it
# fails naming the address: long enough for a server that is restarting, short enough that a
# server that is gone (say, a stopped demo's) is an error, not ten minutes of pyspark's retries.
REMOTE_ANSWER_SECONDS = 20.0
SPARK_CONNECT_PORT = 15002  # Spark Connect's port when an address gives none


def connect_address(url: str) -> tuple[str, int | None]:
    """host and port of ``sc://host[:port][/;params]`` (None: a port that is not a number). The
    params (a token, say) are never part of it, so it may be printed."""
    hostport = url[len("sc://"):].split("/", 1)[0]
    host, colon, port = hostport.rpartition(":")
    if not colon:
        return hostport or "127.0.0.1", SPARK_CONNECT_PORT
    return host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else None


def _answers(url: str) -> bool:
    """Whether anything listens at the host:port of ``sc://host:port[/;params]``."""
    host, port = connect_address(url)
    return port is not None and answers(port, host=host)


def _wait_answering(url: str, within: float) -> None:
    """Return once something accepts connections at `url`'s address; `SparkSessionError` naming
    the address after `within` seconds of refusals."""
    import time

    deadline = time.monotonic() + within
    while not _answers(url):
        if time.monotonic() >= deadline:
            host, port = connect_address(url)
            raise SparkSessionError(
                f"no Spark Connect server answers at {host}:{port} (spark.remote or $SPARK_REMOTE; "
                f"waited {within:.0f} s): start that server, or leave spark.remote and $SPARK_REMOTE "
                "unset to use the embedded one (`deltaport spark start`)")
        time.sleep(0.5)


def _release(session: SparkSession, url: str) -> None:
    """Release `session` on its server when the server still answers, else just close the
    channel: a client of a dead server must not spend minutes retrying on its way out."""
    with contextlib.suppress(Exception):
        if not session.is_stopped and _answers(url):
            session.stop()
        else:
            session.client.close()


def close_sessions(url: str | None = None, *, release: bool = True) -> None:
    """Close this process's sessions (of `url`, or all of them). Call before stopping a server
    this process uses, so nothing waits on a server that is going away; `release=False` when
    it is gone already (a new server may answer at the same address)."""
    with _sessions_lock:
        for key in [k for k in _sessions if url is None or k[0] == url]:
            session = _sessions.pop(key)
            if release:
                _release(session, key[0])
            else:
                session.client.close()


def connect(url: str, catalog: CatalogConfig | None = None, *, incarnation: str = "") -> SparkSession:
    """A Spark Connect session to `url` (``sc://host:port[/;params]``) with `catalog` registered.

    `incarnation` names the embedded server process behind `url` (its pid and start time): a
    new one means the old sessions died with their server, so a new session is made. With an
    incarnation (the embedded server) a call to a server that stopped answering fails within
    seconds; without one (a user's cluster) pyspark's patient default retries hold, once something
    answers at the address at all (`REMOTE_ANSWER_SECONDS`).
    Raises `SparkSessionError` when the server lacks Iceberg's SQL extensions.
    """
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    if not url.startswith("sc://"):
        raise SparkSessionError(f"a Spark Connect address starts with sc://, got {url!r}")
    _quiet_query_context_loggers()
    catalog = catalog or CatalogConfig()
    wanted = catalog_conf(catalog)
    key = (url, incarnation, tuple(sorted(wanted.items())))
    with _sessions_lock:
        session = _sessions.get(key)
        if session is not None and not session.is_stopped:
            _make_active(session)
            return session
        if not incarnation:  # a remote server: fail within seconds if nothing is there at all
            _wait_answering(url, REMOTE_ANSWER_SECONDS)
        # create(), not getOrCreate(): the latter returns any earlier session, whatever its address.
        session = SparkSession.builder.remote(url).create()
        if incarnation:
            session.client.set_retry_policies([DefaultPolicy(**EMBEDDED_RETRY_POLICY)])
        # Runs before pyspark's own exit hook for this client (atexit is last-in, first-out),
        # so that hook finds the channel closed instead of retrying a dead server.
        atexit.register(_release, session, url)
        extensions = session.conf.get("spark.sql.extensions", None) or ""
        if ICEBERG_EXTENSIONS not in extensions.split(","):
            session.stop()
            raise SparkSessionError(
                f"the Spark Connect server at {url} runs without Iceberg's SQL extensions "
                f"({ICEBERG_EXTENSIONS}); start it with --jars {ICEBERG_RUNTIME_ARTIFACT}-{ICEBERG_VERSION}.jar "
                "and --conf spark.sql.extensions=" + ICEBERG_EXTENSIONS
            )
        for k, v in wanted.items():  # catalogs are session settings: register ours here
            session.conf.set(k, v)
        try:
            _load_catalog(session, catalog.name)
        except SparkSessionError:
            session.stop()
            raise
        _sessions[key] = session
        _make_active(session)
        return session


def _quiet_query_context_loggers() -> None:
    """pyspark (4.x) logs every server-side SQL error it raises as a JSON record at level ERROR on
    stderr (the `SQLQueryContextLogger`, `DataFrameQueryContextLogger`), before the caller has
    seen the exception: 12 KB on the CLI's stderr for a query Spark refuses, ahead of deltaport's
    own one-line error. Every caller here handles the exception and says what failed, so those
    records say nothing new: they are kept to CRITICAL. Made as pyspark makes them
    (`PySparkLogger.getLogger`): a plain logger of that name would break pyspark's call, which
    passes fields a plain logger does not take."""
    import logging

    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


# Iceberg's JDBC catalog creates (or upgrades) its own tables when a session first loads it; two
# sessions doing it at once on a new database race, and the loser fails with one of these.
_CATALOG_INIT_RACES = ("Cannot initialize JDBC catalog", "Cannot check and eventually update SQL schema")


def _load_catalog(session: SparkSession, name: str, *, attempts: int = 4) -> None:
    """Load the catalog in the new session now (a catalog is loaded per session, on first use),
    so a catalog that cannot load fails here, naming it, and a lost initialization race (see
    above) is retried instead of failing the first query of a run."""
    import time

    from pyspark.errors import PySparkException

    for attempt in range(attempts):
        try:
            # Any namespace: resolving it loads the catalog, and a missing one is an answer, not a
            # failed call (SHOW NAMESPACES failed on a new hadoop warehouse: an ERROR line per session).
            session.catalog.databaseExists(f"`{name}`.`default`")
            return
        except PySparkException as exc:
            if attempt + 1 < attempts and any(m in str(exc) for m in _CATALOG_INIT_RACES):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise SparkSessionError(f"the Iceberg catalog {name!r} does not load: {str(exc)[:2000]}") from exc


def _make_active(session: SparkSession) -> None:
    """Make `session` the thread's active one (and the default if that one is closed), as a
    classic ``getOrCreate()`` would: parts of pyspark's Connect client (DDL-string schemas,
    checkpoint results) use the active session, not the one they were called on."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    ConnectSession._active_session.session = session
    with ConnectSession._lock:
        if ConnectSession._default_session is None or ConnectSession._default_session.is_stopped:
            ConnectSession._default_session = session


def local_checkpoint(df):
    """``df.localCheckpoint(eager=True)``, bound to `df`'s own session.

    pyspark 4.1's Connect client attaches the checkpointed DataFrame to the *active* session of
    the thread (``conversion.proto_to_remote_cached_dataframe``), not to the session that ran
    the checkpoint: in a process with several sessions (a test run, a Dagster step beside a
    sensor) the next query then names a cached relation the other session never had ("No
    DataFrame with id ... is found in the session"). Making `df`'s session the active one for
    the call keeps the result where it was made.
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    local = ConnectSession._active_session
    before = getattr(local, "session", None)
    local.session = df.sparkSession
    try:
        return df.localCheckpoint(eager=True)
    finally:
        local.session = before
