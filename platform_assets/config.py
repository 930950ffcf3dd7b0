"""deltaport's one config file (`deltaport.yaml`): sources, Kafka, Spark, the Iceberg catalog.

What flows through: a YAML file -> a frozen `PlatformConfig`. Sources are listed under `sources:`,
each with a `format`: `prostore` (a datamart: backup topic + signal topic, or backup topic alone;
the older `datamarts:` list means the same) or a registered change-stream format (`qlik`, `dataworks`,
`datastream`, ...: resources/formats/; one change topic whose deltas the platform seals, with the sealing limits). `PlatformConfig.datamarts` holds the Prostore ones,
`PlatformConfig.streams` the others.

Guarantees: every key is checked (unknown keys, wrong types and missing required keys fail with
one message that names the key's path, e.g. `sources[1].topic`); secrets are never written in
the file but referenced as `{env: NAME}` and resolved when a client is built, not when the file
is read.
"""

from __future__ import annotations

import os
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from platform_assets.config_error import ConfigError as ConfigError  # re-exported: the config's error
from platform_assets.lake_safety import check_lake
from resources.formats import STREAM_FORMATS as REGISTERED_FORMATS

CONFIG_ENV = "DELTAPORT_CONFIG"
DEFAULT_CONFIG = "deltaport.yaml"


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str | None = None  # None: $KAFKA_BOOTSTRAP_SERVERS, else `deltaport broker start`
    properties: dict = field(default_factory=dict)  # any librdkafka property; secrets as {env: NAME}
    timeout_seconds: float = 30.0


@dataclass(frozen=True)
class SparkConfig:
    remote: str | None = None  # sc://host:port of a Spark Connect server; None: $SPARK_REMOTE, else embedded
    master: str = "local[2]"  # the embedded server's master
    conf: dict = field(default_factory=dict)  # the embedded server's settings
    # The embedded server stops itself after this long with no client connected (0: never), so a
    # cron `sync` does not leave a JVM of 1-2 GB behind; the next run starts it again (6-9 s).
    idle_timeout_minutes: float = 60.0


@dataclass(frozen=True)
class LakeConfig:
    catalog: str = "lake"
    type: str = "hadoop"  # hadoop | rest | jdbc | hive
    warehouse: str = "lake"
    uri: str | None = None
    properties: dict = field(default_factory=dict)
    # Table maintenance inside the delta runs (platform_assets/maintenance_step.py): keys of
    # resources.lake.maintenance_settings.MaintenanceSettings; `enabled: false` turns it off.
    maintenance: dict = field(default_factory=dict)
    # Deltas per partition of a history table (resources/lake/history_layout.py): a new table, or
    # one still partitioned per delta, gets truncate(this, delta_num); 0 keeps one per delta.
    history_partition_deltas: int = 1000
    # The snapshot's primary_key_unique check runs in the delta runs that cross a multiple of
    # this, over the keys of every delta since the previous multiple (resources/lake/key_check.py:
    # `key_check_deltas`), and over every key whenever maintenance runs; 1 checks every run.
    key_check_every_deltas: int = 10


@dataclass(frozen=True)
class SensorConfig:
    interval_seconds: int = 15
    max_messages_per_tick: int = 5000
    # A backlog of due deltas lands in range runs of at most this many (sensor, `sync`, and UI
    # backfills through the assets' BackfillPolicy); 1 gives one run per delta. A run's fixed
    # cost (a MERGE and a key check per table, each scanning what it must) is paid once per range:
    # 100 deltas of 10k rows landed in 70 s in one run, 105 s in five runs of 20 (2 cores,
    # bench/dagster_bench.py); the Spark server peaked at the same 3.6 GiB either way. The run's
    # driver-read deltas (each under 8 MiB) are held as Arrow until written: at most about
    # 100 x 8 MiB.
    max_deltas_per_run: int = 100
    # The check lag_within_bound fails past this: now minus the time of the oldest delta ready at
    # the source and not landed (platform_assets/lag.py).
    max_lag_seconds: float = 3600.0
    # Dagster holds the partitions, runs and events of a source's last this many landed deltas;
    # the delta runs retire older ones from the instance (platform_assets/retirement.py), so the
    # UI's partition views and the sensors cost what the window holds, not the lake's age. A
    # retired delta stays in the lake: `deltaport read --as-of-delta N` reads it, `deltaport
    # rerun SOURCE N` puts its partition back and lands it again. 0: keep every partition.
    # 2,000 (a week of deltas every 5 minutes) keeps the UI's first view after a new delta flat
    # from 1,000 deltas on; 10,000 costs it 1.3-5.7x that (bench/partitions_ui_bench.py, docs/operating.md).
    partition_window: int = 2_000
    # A run that failed and that Dagster said it would retry (dagster.yaml `run_retries`: a worker
    # or host that died) holds its source's later deltas; if no retry has come this long after the
    # failure (Dagster's retry consumer reads failures every 5 s, and can miss one), the sensor
    # requests the failed run's deltas itself.
    retry_after_seconds: float = 60.0


@dataclass(frozen=True)
class BootstrapConfig:
    """A snapshot backup (BACKUP_TO_KAFKA --snapshotDepth) to start a datamart's lake from: its
    topic, and the source delta its last delta corresponds to (the snapshot renumbers from 0)."""

    topic: str
    last_delta: int


@dataclass(frozen=True)
class DatamartConfig:
    """A Prostore datamart: its BACKUP_TO_KAFKA topic and, usually, its signal topic. Without
    `signal_topic` the source is backup-only: a delta lands once its backup increment is complete,
    in order (no signal_events asset). With `bootstrap`, the lake starts from a snapshot backup:
    its deltas land as source deltas last_delta - depth .. last_delta, then the live ones follow."""

    name: str
    backup_topic: str
    signal_topic: str | None = None
    bootstrap: BootstrapConfig | None = None
    # Keep every closed row version in lake.<name>_history.<table> (FOR SYSTEM_TIME queries,
    # as-of reads without tags: resources/lake/prostore_history.py).
    history: bool = True

    @property
    def backup_only(self) -> bool:
        return self.signal_topic is None


PROSTORE = "prostore"
STREAM_FORMATS = REGISTERED_FORMATS  # derived from the registry: a new format needs no line here
FORMATS = (PROSTORE, *STREAM_FORMATS)


@dataclass(frozen=True)
class StreamConfig:
    """A change topic of a registered format (Qlik Replicate, DataWorks, Datastream, ...: resources/formats/);
    the platform seals its deltas (resources/changestream/sealing.py): a delta ends at a boundary of the format once it holds more than
    `max_rows` rows or spans more than `max_seconds` of event time."""

    name: str
    format: str
    topic: str
    max_rows: int = 100_000
    max_seconds: float = 300.0
    lateness_seconds: float = 60.0  # Datastream: how late an event may arrive (event time)
    idle_seconds: float = 60.0  # seal what is sealable when nothing arrived for this long
    # Keep every closed row version in lake.<name>_history.<table> (FOR SYSTEM_TIME queries,
    # as-of reads without tags: resources/lake/stream_history.py).
    history: bool = True


@dataclass(frozen=True)
class StateConfig:
    """Where the delta index, the ledger of sealed deltas and `sync`'s cursors live: by default
    SQLite files in `state_dir` (one machine); a PostgreSQL URL for a deployment whose sensor,
    runs and CLI run on several hosts. The password only as {env: NAME}."""

    url: str | None = None
    password: dict | None = None


@dataclass(frozen=True)
class PlatformConfig:
    datamarts: tuple[DatamartConfig, ...] = ()
    streams: tuple[StreamConfig, ...] = ()
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    sensor: SensorConfig = field(default_factory=SensorConfig)
    state_dir: str = ".deltaport"  # local state: SQLite stores (unless `state.url`), server addresses, logs
    state: StateConfig = field(default_factory=StateConfig)
    code: tuple[str, ...] = ()  # Python modules of user assets (platform_assets/build_on.py)
    source_file: str | None = None

    @property
    def source_names(self) -> list[str]:
        return [d.name for d in self.datamarts] + [s.name for s in self.streams]

    def state_url(self, name: str) -> str:
        """Where the store `name` (index, ledger) is: `state.url`, else <state_dir>/<name>.sqlite."""
        return self.state.url or str(self.resolve_path(self.state_dir) / f"{name}.sqlite")

    @property
    def state_password_env(self) -> str | None:
        return self.state.password["env"] if self.state.password else None

    def resolve_path(self, value: str) -> Path:
        """Relative paths in the file are relative to the file's folder, not the cwd."""
        base = Path(self.source_file).parent if self.source_file else Path.cwd()
        path = Path(value)
        return path if path.is_absolute() else (base / path).resolve()


_LAKE_TYPES = ("hadoop", "rest", "jdbc", "hive")
# 0 means "no lateness" / "seal at once" / "the snapshot ends at source delta 0" / "never idle" /
# "expire anything older than now" / "a history partition per delta" / "keep every partition" /
# "request a failed run's missing retry at once"
_ZERO_ALLOWED = ("lateness_seconds", "idle_seconds", "last_delta", "idle_timeout_minutes", "expire_after_seconds",
                 "orphan_age_seconds", "history_partition_deltas", "partition_window", "retry_after_seconds")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # a source names Iceberg namespaces and Dagster assets
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _build(cls, raw: Any, path: str, file: str | None):
    if not isinstance(raw, dict):
        raise ConfigError(path, f"must be a mapping, got {type(raw).__name__}", file)
    known = {f.name: f for f in fields(cls) if f.name != "source_file"}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{path}.{key}".lstrip("."), f"unknown key; known: {', '.join(known)}", file)
    values = {}
    for name, f in known.items():
        sub = f"{path}.{name}".lstrip(".")
        if name not in raw:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(sub, "is required", file)
            continue
        values[name] = _value(f.type, raw[name], sub, file)
    return cls(**values)


def _value(typ: str, raw: Any, path: str, file: str | None):
    nested = {"KafkaConfig": KafkaConfig, "SparkConfig": SparkConfig, "LakeConfig": LakeConfig,
              "SensorConfig": SensorConfig, "StateConfig": StateConfig}
    if typ in nested:
        return _build(nested[typ], raw, path, file)
    if typ == "BootstrapConfig | None":
        return None if raw is None else _build(BootstrapConfig, raw, path, file)
    if typ == "tuple[DatamartConfig, ...]":
        if not isinstance(raw, list):
            raise ConfigError(path, "must be a list of datamarts", file)
        return tuple(_build(DatamartConfig, item, f"{path}[{i}]", file) for i, item in enumerate(raw))
    if typ == "tuple[str, ...]":  # `code:`: module names
        if not isinstance(raw, list) or not all(isinstance(m, str) and _MODULE.match(m) for m in raw):
            raise ConfigError(path, f"must be a list of Python module names (a.b.c), got {raw!r}", file)
        return tuple(raw)
    if typ == "bool":
        if not isinstance(raw, bool):
            raise ConfigError(path, f"must be true or false, got {raw!r}", file)
        return raw
    if typ == "dict | None" and raw is None:
        return None
    if typ in ("dict", "dict | None"):
        if not isinstance(raw, dict):
            raise ConfigError(path, "must be a mapping", file)
        return dict(raw)
    if typ in ("str", "str | None"):
        if raw is None and typ == "str | None":
            return None
        if not isinstance(raw, str) or not raw:
            raise ConfigError(path, f"must be a non-empty string, got {raw!r}", file)
        return raw
    if typ in ("int", "float"):
        zero = path.rsplit(".", 1)[-1] in _ZERO_ALLOWED
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw < 0 or (raw == 0 and not zero):
            raise ConfigError(path, f"must be a {'non-negative' if zero else 'positive'} number, got {raw!r}", file)
        return int(raw) if typ == "int" else float(raw)
    raise ConfigError(path, f"unsupported type {typ}", file)  # a bug in this module, not in the file


def _sources(raw: Any, file: str | None) -> tuple[list[DatamartConfig], list[StreamConfig]]:
    """`sources:` entries, split by format (prostore -> DatamartConfig, others -> StreamConfig)."""
    if not isinstance(raw, list):
        raise ConfigError("sources", "must be a list of sources", file)
    datamarts, streams = [], []
    for i, item in enumerate(raw):
        path = f"sources[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(path, f"must be a mapping, got {type(item).__name__}", file)
        fmt = item.get("format", PROSTORE)
        if fmt not in FORMATS:
            raise ConfigError(f"{path}.format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}", file)
        if fmt == PROSTORE:
            datamarts.append(_build(DatamartConfig, {k: v for k, v in item.items() if k != "format"}, path, file))
        else:
            streams.append(_build(StreamConfig, item, path, file))
    return datamarts, streams


def parse_config(raw: Any, file: str | None = None) -> PlatformConfig:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("<file>", f"must be a mapping, got {type(raw).__name__}", file)
    raw = dict(raw)
    where = "sources" if "sources" in raw or "datamarts" not in raw else "datamarts"  # for errors
    extra_dm, streams = _sources(raw.pop("sources"), file) if "sources" in raw else ([], [])
    cfg = _build(PlatformConfig, {k: v for k, v in raw.items() if k != "streams"}, "", file)
    if "streams" in raw:
        raise ConfigError("streams", "unknown key; list change topics under `sources:` with a `format`", file)
    cfg = PlatformConfig(**{**cfg.__dict__, "datamarts": (*cfg.datamarts, *extra_dm), "streams": tuple(streams)})
    names = cfg.source_names
    if not names:
        raise ConfigError(where, "is required: list at least one source (or datamart)", file)
    if len(set(names)) != len(names):
        raise ConfigError(where, f"source and datamart names must be unique, got {names}", file)
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ConfigError(where, f"names must be letters, digits and _, starting with a letter: "
                                     f"{bad}", file)
    if cfg.lake.type not in _LAKE_TYPES:
        raise ConfigError("lake.type", f"must be one of {', '.join(_LAKE_TYPES)}, got {cfg.lake.type!r}", file)
    if cfg.lake.type in ("rest", "jdbc", "hive") and not cfg.lake.uri:
        raise ConfigError("lake.uri", f"is required for a {cfg.lake.type} catalog", file)
    check_lake(cfg.lake, file)  # object storage under a hadoop catalog, secrets in the file
    maintenance_settings(cfg)  # its keys, checked now
    if cfg.spark.remote is not None and not str(cfg.spark.remote).startswith("sc://"):
        raise ConfigError("spark.remote", f"must be a Spark Connect address sc://host:port, got {cfg.spark.remote!r}",
                          file)
    url = cfg.state.url
    if url is not None and not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("state.url", f"must be a PostgreSQL URL postgresql://user@host:port/db (leave it out for "
                                       f"SQLite files in state_dir), got {url!r}", file)
    if url is not None and ":" in url.split("://", 1)[1].split("@", 1)[0] and "@" in url:
        raise ConfigError("state.url", "must not hold the password: give it as `password: {env: NAME}`", file)
    pw = cfg.state.password
    if pw is not None and (set(pw) != {"env"} or not isinstance(pw["env"], str)):
        raise ConfigError("state.password", f"must be {{env: NAME}} (the variable holding it), got {pw!r}", file)
    return PlatformConfig(**{**cfg.__dict__, "source_file": file})


def load_config(path: str | os.PathLike | None = None) -> PlatformConfig:
    """Read the config from `path`, else $DELTAPORT_CONFIG, else ./deltaport.yaml (read now)."""
    chosen = Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    if not chosen.exists():
        raise ConfigError("<file>", f"config file {chosen} not found (set {CONFIG_ENV} or pass --config)")
    try:
        raw = yaml.safe_load(chosen.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError("<file>", f"not valid YAML: {exc}", str(chosen)) from exc
    return parse_config(raw, str(chosen.resolve()))


def maintenance_settings(cfg: PlatformConfig):
    """`lake.maintenance` as MaintenanceSettings (None: `enabled: false`); wrong keys fail naming them."""
    from resources.lake.maintenance_settings import MaintenanceSettings  # light: no Spark-side imports

    raw = dict(cfg.lake.maintenance)
    enabled = raw.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("lake.maintenance.enabled", f"must be true or false, got {enabled!r}", cfg.source_file)
    return _build(MaintenanceSettings, raw, "lake.maintenance", cfg.source_file) if enabled else None


def resolve_secret(value: Any) -> Any:
    """`{env: NAME}` -> the value of $NAME (read now); anything else as is."""
    if isinstance(value, dict) and set(value) == {"env"}:
        name = value["env"]
        if name not in os.environ:
            raise ConfigError(f"env:{name}", "environment variable is not set")
        return os.environ[name]
    return value
