"""A real, throw-away Apache Kafka broker (single-node KRaft) for tests and the demo.

What this module guarantees:

* The broker is the genuine Apache Kafka server (``kafka.Kafka``, version `KAFKA_VERSION`), run
  from the jars Maven resolves for ``resources/kafka/pom.xml``. Jars are cached outside git in
  ``$DELTAPORT_CACHE_DIR/kafka-<version>/`` (default ``~/.cache/deltaport/kafka-<version>/``);
  the environment is read at call time, never at import time. Resolution is
  `resources.maven.resolve_pom`: a marker file, written only after Maven succeeded, makes later
  calls instant; concurrent first calls are serialised by a file lock.
* `EmbeddedKafka` listens on 127.0.0.1 only, on free ports picked at start, and keeps its data
  and logs (the JVM's output too) in a fresh temporary folder, never on the parent's terminal.
* ``start()`` returns only once the broker answers a metadata request, or raises `BrokerError`
  (start timeout, early exit, failed storage format) whose message carries the tail of the
  broker's logs. ``stop()`` is idempotent: SIGTERM, SIGKILL after a grace period, then the data
  folder is removed unless ``keep_data=True``. On Linux the broker also dies with the Python
  process that started it (parent-death signal), and brokers still running at interpreter exit
  are stopped, so no stray JVM outlives a test run.
* ``restart()`` kills (or stops) the JVM and starts it again on the same ports and storage:
  what was written stays, clients reconnect to the same address (the fault suite uses it).
* With ``security=BrokerSecurity(...)`` the client listener is SASL_SSL (SCRAM-SHA-512, a
  self-signed certificate for 127.0.0.1) with ACLs (`broker_security`); see `client_config(user)`.
* Topics are never auto-created (``auto.create.topics.enable=false``); every internal topic has
  replication factor 1, so consumer groups and transactions work on the single node.

Nothing here imports Dagster. Every failure this module raises on purpose is a `BrokerError`.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from resources.class_archive import (ClassArchive, class_archive, classpath_identity, mentions_sharing, publish,
                                     sharing_options)
from resources.errors import DeltaportError
from resources.java import find_java
from resources.kafka.broker_security import BrokerSecurity, format_arguments, server_properties, write_tls
from resources.maven import MARKER_NAME as MARKER_NAME  # re-exported: the jars folder's marker
from resources.maven import cache_root, resolve_pom
from resources.net import free_port

__all__ = [
    "KAFKA_VERSION",
    "BrokerError",
    "EmbeddedKafka",
    "ensure_kafka_jars",
    "kafka_bootstrap",
    "kafka_cache_dir",
]

KAFKA_VERSION = "4.1.2"  # keep in step with <kafka.version> in pom.xml
POM_PATH = Path(__file__).with_name("pom.xml")
LOG_TAIL_LINES = 40
ERROR_EXCERPT_LINES = 20

_log = logging.getLogger(__name__)
# The readiness probe's own librdkafka client: "connection refused" while the JVM boots is
# expected noise, so it goes nowhere (not even to logging's last-resort stderr handler).
_probe_log = logging.getLogger(__name__ + ".probe")
_probe_log.addHandler(logging.NullHandler())
_probe_log.propagate = False


class BrokerError(DeltaportError):
    """The embedded Kafka broker (or the Maven resolution of its jars) failed."""


# --------------------------------------------------------------------------------------------
# Jars


def kafka_cache_dir() -> Path:
    """Where the Kafka jars are cached: ``$DELTAPORT_CACHE_DIR/kafka-<version>`` or
    ``~/.cache/deltaport/kafka-<version>`` (the environment is read now, at call time)."""
    return cache_root() / f"kafka-{KAFKA_VERSION}"


def ensure_kafka_jars(cache_dir: Path | None = None, *, timeout: float = 900.0) -> Path:
    """Make sure the broker's jars are in `cache_dir` (default `kafka_cache_dir()`) and return it.

    Quick when already present (a marker file holding the POM's digest is checked; a changed
    POM resolves again). Otherwise runs ``mvn dependency:copy-dependencies`` on ``pom.xml``
    (see `resources.maven.resolve_pom`); raises `BrokerError` with the tail of Maven's output
    if Maven is missing or fails.
    """
    directory = Path(cache_dir).expanduser() if cache_dir is not None else kafka_cache_dir()
    return resolve_pom(
        POM_PATH,
        directory,
        timeout=timeout,
        error_cls=BrokerError,
        what=f"Kafka {KAFKA_VERSION} jars",
        expect="kafka_2.13-*.jar",
        no_maven="cannot resolve the Kafka broker jars: Maven ('mvn') is not on PATH; install "
        "Maven, or point KAFKA_BOOTSTRAP_SERVERS at a running broker",
    )


# --------------------------------------------------------------------------------------------
# The broker


def _java() -> str:
    java = find_java()
    if java is None:
        raise BrokerError("cannot start Kafka: no 'java' on PATH (and JAVA_HOME is not set); Kafka 4 needs Java 17+")
    return java



def _new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as Uuid.toString).
    Kafka's own generator also avoids a leading '-', which a command line would take for a flag."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not cid.startswith("-"):
            return cid


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(_ANSI.sub("", text).splitlines()[-lines:])


def _read_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return _tail(text, lines)


_running: set[EmbeddedKafka] = set()  # strong references: a started broker lives until stop()


@atexit.register
def _stop_all() -> None:
    for kafka in list(_running):
        with contextlib.suppress(Exception):
            kafka.stop()


class EmbeddedKafka:
    """A single-node KRaft Kafka broker+controller on 127.0.0.1, in a temporary data folder.

    Use as a context manager (``with EmbeddedKafka() as kafka: kafka.bootstrap_servers``), or
    call `start()` and `stop()`. Ports are picked free at start unless given. `properties`
    override or add broker settings (``server.properties`` keys, values as strings).
    """

    DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
        "-Xms64m",
        "-Xmx512m",
        "-XX:+UseSerialGC",          # small heap, 2 cores: less overhead than G1
        "-XX:TieredStopAtLevel=1",   # C1 only: the broker starts ~faster; plenty for tests
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
        # Kafka logs its own shutdown; log4j's hook would close the log file under it.
        "-Dlog4j2.shutdownHookEnabled=false",
    )

    def __init__(
        self,
        *,
        jars_dir: Path | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 20.0,
        keep_data: bool = False,
        work_dir: Path | None = None,
        broker_port: int | None = None,
        controller_port: int | None = None,
        properties: Mapping[str, str] | None = None,
        jvm_options: Sequence[str] | None = None,
        security: BrokerSecurity | None = None,
    ) -> None:
        self._jars_dir = Path(jars_dir) if jars_dir is not None else None
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.keep_data = keep_data
        self._work_dir = Path(work_dir) if work_dir is not None else None
        self._fixed_broker_port = broker_port
        self._fixed_controller_port = controller_port
        self._properties = dict(properties or {})
        self.security = security
        self._tls: tuple[Path, Path, str] | None = None  # (keystore, CA file, store password)
        self._static_quorum = "controller.quorum.voters" in self._properties
        self._jvm_options = tuple(jvm_options) if jvm_options is not None else self.DEFAULT_JVM_OPTIONS
        self._proc: subprocess.Popen[bytes] | None = None
        self._command: list[str] = []
        self._archive: ClassArchive | None = None  # the broker JVM's class archive
        self._data_dir: Path | None = None
        self._broker_port: int | None = None
        self._controller_port: int | None = None
        self._lock = threading.Lock()
        self.cluster_id: str | None = None
        self.start_seconds: float | None = None  # how long the last start() took

    # -- public --------------------------------------------------------------------------

    @property
    def class_archive(self) -> ClassArchive | None:
        """The broker JVM's class archive (`resources.class_archive`), known once started."""
        return self._archive

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:PORT`` of the client listener (only while started)."""
        if self._broker_port is None or self._proc is None:
            raise BrokerError("the embedded Kafka broker is not running")
        return f"127.0.0.1:{self._broker_port}"

    def client_config(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka settings a client needs besides bootstrap.servers: none for a PLAINTEXT
        broker; for a secured one, SASL_SSL as `user` (default: the admin) with its password, or
        `password` (a wrong one, to see it refused)."""
        if self.security is None:
            return {}
        if self._tls is None:
            raise BrokerError("the embedded Kafka broker is not running")
        return self.security.client_config(self._tls[1], user, password)

    @property
    def data_dir(self) -> Path | None:
        """The temporary folder holding server.properties, the logs and the partition data."""
        return self._data_dir

    @property
    def log_path(self) -> Path | None:
        """The broker's log4j log file."""
        return self._data_dir / "logs" / "server.log" if self._data_dir else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedKafka:
        """Resolve jars if needed, format storage, start the JVM and wait until it answers."""
        with self._lock:
            if self._proc is not None:
                raise BrokerError("this EmbeddedKafka is already started")
            began = time.monotonic()
            jars = self._jars_dir if self._jars_dir is not None else ensure_kafka_jars()
            if not any(Path(jars).glob("kafka_2.13-*.jar")):
                raise BrokerError(f"no Kafka jars (kafka_2.13-*.jar) in {jars}")
            # A port picked free may be taken by someone else before the JVM binds it: retry
            # with fresh ports, but only when we picked them.
            auto_ports = self._fixed_broker_port is None and self._fixed_controller_port is None
            attempts = 3 if auto_ports else 1
            for attempt in range(1, attempts + 1):
                try:
                    self._start_once(Path(jars), began)
                    break
                except BrokerError as exc:
                    bind_race = "Address already in use" in str(exc)
                    self._teardown(remove_data=not self.keep_data)
                    if not (bind_race and attempt < attempts):
                        raise
                    _log.warning("Kafka port taken before the broker bound it; retrying on new ports")
                except BaseException:  # Ctrl-C while waiting, an OSError...: leave nothing running
                    self._teardown(remove_data=not self.keep_data)
                    raise
            self.start_seconds = time.monotonic() - began
            _running.add(self)
            _log.info("Kafka %s up at %s in %.1f s (data %s)", KAFKA_VERSION,
                      self.bootstrap_servers, self.start_seconds, self._data_dir)
            return self

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after `stop_timeout`) and remove its data
        folder unless `keep_data`. Safe to call more than once."""
        with self._lock:
            self._teardown(remove_data=not self.keep_data)
            _running.discard(self)

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"127.0.0.1:{self._broker_port}" if self.running else "stopped"
        return f"<EmbeddedKafka {KAFKA_VERSION} {where}>"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the broker's log files (for error messages and debugging)."""
        if self._data_dir is None:
            return "(no data folder)"
        parts = []
        for name in ("logs/server.log", "stdout.log", "format.log"):
            path = self._data_dir / name
            tail = _read_tail(path, lines)
            if tail.strip():
                parts.append(f"--- {path} (last {lines} lines) ---\n{tail}")
        errors = self._error_excerpt()
        if errors:
            head = f"--- errors logged (first {ERROR_EXCERPT_LINES} lines, stack frames left out) ---"
            parts.insert(0, f"{head}\n{errors}")
        return "\n".join(parts) if parts else f"(no log output in {self._data_dir})"

    # -- internals -----------------------------------------------------------------------

    def _error_excerpt(self) -> str:
        """The ERROR/FATAL lines with their exception and 'Caused by' lines (no stack frames):
        in a failed start they name the cause, which the tail (shutdown chatter) often does not."""
        assert self._data_dir is not None
        picked: list[str] = []
        for name in ("logs/server.log", "stdout.log", "format.log"):
            try:
                fh = open(self._data_dir / name, errors="replace")
            except OSError:
                continue
            with fh:
                in_error = False
                for raw in fh:
                    line = raw.rstrip()
                    if line.startswith("["):
                        in_error = "] ERROR " in line or "] FATAL " in line
                    elif line.startswith("Exception in thread"):
                        in_error = True
                    if not in_error or not line or line.startswith(("\tat ", "\t...")):
                        continue
                    if line not in picked:
                        picked.append(line)
                    if len(picked) >= ERROR_EXCERPT_LINES:
                        return "\n".join(picked)
        return "\n".join(picked)

    def _start_once(self, jars: Path, began: float) -> None:
        java = _java()
        if self._work_dir is not None:
            self._work_dir.mkdir(parents=True, exist_ok=True)
        data = Path(tempfile.mkdtemp(prefix="deltaport-kafka-", dir=self._work_dir))
        self._data_dir = data
        (data / "logs").mkdir()
        self._broker_port = self._fixed_broker_port or free_port()
        self._controller_port = self._fixed_controller_port or free_port()
        while self._controller_port == self._broker_port:
            self._controller_port = free_port()
        self.cluster_id = _new_cluster_id()

        extra_format: list[str] = []
        if self.security is not None:
            self._tls = write_tls(data / "tls", java)
            extra_format = format_arguments(self.security)
        props_path = data / "server.properties"
        props_path.touch(mode=0o600)  # a secured broker's file holds passwords
        props_path.write_text(self._server_properties(data), encoding="utf-8")
        log4j_path = data / "log4j2.properties"
        log4j_path.write_text(_LOG4J2_PROPERTIES.format(log_file=data / "logs" / "server.log"), encoding="utf-8")

        classpath = f"{jars}{os.sep}*"
        storage_archive, self._archive = (self._class_archive(name, jars, java)
                                          for name in ("kafka-storage-tool", "kafka-broker"))
        jvm = [
            java,
            *self._jvm_options,
            f"-Dlog4j2.configurationFile={log4j_path}",
            f"-Dkafka.logs.dir={data / 'logs'}",
            "-cp",
            classpath,
        ]

        # 1. Format the storage (KRaft): writes meta.properties and, with --standalone, a
        #    bootstrap checkpoint making this node the single voter of a dynamic quorum.
        deadline = began + self.start_timeout
        with open(data / "format.log", "wb") as out:
            try:
                fmt = subprocess.run(
                    [*jvm, *sharing_options(storage_archive), "kafka.tools.StorageTool", "format",
                     "--cluster-id", self.cluster_id, "--config", str(props_path),
                     *([] if self._static_quorum else ["--standalone"]), *extra_format],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    timeout=max(5.0, deadline - time.monotonic()),
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise BrokerError(
                    f"formatting Kafka storage timed out after {self.start_timeout:.0f} s\n{self.log_tail()}"
                ) from None
        if storage_archive is not None:
            publish(storage_archive, killed=fmt.returncode != 0)
        if fmt.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed (exit {fmt.returncode})\n{self.log_tail()}")

        # 2. Start the broker and wait until it answers a metadata request.
        self._command = [*jvm, *sharing_options(self._archive), "kafka.Kafka", str(props_path)]
        self._launch(deadline)

    def _launch(self, deadline: float) -> None:
        """Start the broker's JVM on the formatted storage (its output goes to files only; it dies
        with us on Linux), then wait until it answers a metadata request."""
        assert self._data_dir is not None
        with open(self._data_dir / "stdout.log", "ab") as out:
            self._proc = subprocess.Popen(
                self._command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self._data_dir,
                start_new_session=True,  # a Ctrl-C at the terminal reaches us, and we stop it
                # The death signal follows the *thread* that forks, so only from the main thread.
                preexec_fn=_set_parent_death_signal
                if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
                else None,
            )
        self._wait_ready(deadline)

    def _class_archive(self, name: str, jars: Path, java: str) -> ClassArchive | None:
        """The class archive of this JVM (`resources.class_archive`): one per Kafka jar set, JVM
        options and JDK; None when the options speak of class-data sharing themselves."""
        if mentions_sharing(" ".join(self._jvm_options)):
            return None
        try:
            return class_archive(name, [*classpath_identity(sorted(jars.glob("*.jar"))), *self._jvm_options],
                                 java=java, cache=cache_root())
        except OSError as exc:  # an unwritable cache: start without sharing
            _log.warning("the Kafka broker starts without a class archive: %s", exc)
            return None

    def restart(self, *, crash: bool = True, down_seconds: float = 0.0) -> None:
        """Stop the broker and start it again on the same ports and storage: topics, messages and
        committed offsets stay, and clients reconnect to the same address (the fault suite's
        broker restart). `crash`: SIGKILL, as a lost machine; else SIGTERM, as an orderly restart.
        `down_seconds`: how long it stays down."""
        with self._lock:
            proc = self._proc
            if proc is None or self._data_dir is None:
                raise BrokerError("restart() needs a started EmbeddedKafka")
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL if crash else signal.SIGTERM)
            proc.wait(timeout=self.stop_timeout + 10)
            time.sleep(down_seconds)
            self._launch(time.monotonic() + self.start_timeout)

    def _server_properties(self, data: Path) -> str:
        bp, cp = self._broker_port, self._controller_port
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{cp}",
            "listeners": f"PLAINTEXT://127.0.0.1:{bp},CONTROLLER://127.0.0.1:{cp}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{bp},CONTROLLER://127.0.0.1:{cp}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(data / "kraft-data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        }
        if self.security is not None and self._tls is not None:
            props.update(server_properties(self.security, bp, cp, self._tls[0], self._tls[2]))
        if self._static_quorum:  # the caller chose the static quorum (controller.quorum.voters)
            del props["controller.quorum.bootstrap.servers"]
        props.update({str(k): str(v) for k, v in self._properties.items()})
        lines = ["# written by resources/kafka/broker.py (EmbeddedKafka)"]
        lines += [f"{k}={_escape_property(v)}" for k, v in props.items()]
        return "\n".join(lines) + "\n"

    def _wait_ready(self, deadline: float) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        assert self._proc is not None and self._broker_port is not None
        port = self._broker_port
        admin = None
        last_problem = "no answer yet"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise BrokerError(
                    f"the Kafka broker exited early (exit code {code}) while starting\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"the Kafka broker did not answer on 127.0.0.1:{port} within "
                    f"{self.start_timeout:.0f} s ({last_problem})\n{self.log_tail()}"
                )
            # Cheap TCP check first, so the client does not spam connection-refused retries.
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=min(1.0, remaining)):
                    pass
            except OSError as exc:
                last_problem = f"port closed: {exc}"
                time.sleep(min(0.2, max(0.0, remaining)))
                continue
            if admin is None:
                admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "logger": _probe_log,
                                     **self.client_config()})
            try:
                md = admin.list_topics(timeout=max(0.1, min(2.0, remaining)))
                if md.brokers:
                    return
                last_problem = "metadata without brokers"
            except KafkaException as exc:
                last_problem = f"metadata request failed: {exc}"
            time.sleep(0.1)

    def _teardown(self, *, remove_data: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                _log.warning("Kafka broker (pid %s) ignored SIGTERM for %.0f s; killing it",
                             proc.pid, self.stop_timeout)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
        if proc is not None and self._archive is not None:
            publish(self._archive, killed=proc.returncode == -signal.SIGKILL)
        data, self._data_dir = self._data_dir, None
        if data is not None:
            if remove_data:
                shutil.rmtree(data, ignore_errors=True)
            else:
                self._data_dir = data  # keep it inspectable (data_dir, log_path, log_tail)
        self._broker_port = self._controller_port = None


def _escape_property(value: str) -> str:
    # java.util.Properties: backslash is the escape character (paths on Windows would need it)
    return value.replace("\\", "\\\\")


_LOG4J2_PROPERTIES = """\
# written by resources/kafka/broker.py: everything to one file, nothing to the console
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


@contextlib.contextmanager
def kafka_bootstrap(**embedded_kwargs: object) -> Iterator[str]:
    """Yield a Kafka bootstrap string for tests and the demo.

    If ``KAFKA_BOOTSTRAP_SERVERS`` is set (read now), yield it and start nothing. Otherwise
    start an `EmbeddedKafka` (keyword arguments are passed to it), yield its bootstrap string,
    and stop it on exit.
    """
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield external
        return
    with EmbeddedKafka(**embedded_kwargs) as kafka:  # type: ignore[arg-type]
        yield kafka.bootstrap_servers
