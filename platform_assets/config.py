"""deltaport's one config file (`deltaport.yaml`): sources, Kafka, Spark, the Iceberg catalog.

What flows through: a YAML file -> a frozen `PlatformConfig`. Guarantees: every key is checked
(unknown keys, wrong types and missing required keys fail with one message that names the key's
path, e.g. `datamarts[1].backup_topic`); secrets are never written in the file but referenced as
`{env: NAME}` and resolved when a client is built, not when the file is read.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from resources.errors import DeltaportError

CONFIG_ENV = "DELTAPORT_CONFIG"
DEFAULT_CONFIG = "deltaport.yaml"


class ConfigError(DeltaportError):
    def __init__(self, path: str, reason: str, file: str | None = None):
        self.key_path, self.reason = path, reason
        where = f"{file}: " if file else ""
        super().__init__(f"{where}config key `{path}`: {reason}")


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str | None = None  # None: $KAFKA_BOOTSTRAP_SERVERS, else `deltaport broker start`
    properties: dict = field(default_factory=dict)  # any librdkafka property; secrets as {env: NAME}
    timeout_seconds: float = 30.0


@dataclass(frozen=True)
class SparkConfig:
    master: str = "local[2]"
    conf: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LakeConfig:
    catalog: str = "lake"
    type: str = "hadoop"  # hadoop | rest | jdbc | hive
    warehouse: str = "lake"
    uri: str | None = None
    properties: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SensorConfig:
    interval_seconds: int = 15
    max_messages_per_tick: int = 5000


@dataclass(frozen=True)
class DatamartConfig:
    name: str
    signal_topic: str
    backup_topic: str


@dataclass(frozen=True)
class PlatformConfig:
    datamarts: tuple[DatamartConfig, ...]
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    lake: LakeConfig = field(default_factory=LakeConfig)
    sensor: SensorConfig = field(default_factory=SensorConfig)
    state_dir: str = ".deltaport"  # the delta index (SQLite) and other local state
    source_file: str | None = None

    def resolve_path(self, value: str) -> Path:
        """Relative paths in the file are relative to the file's folder, not the cwd."""
        base = Path(self.source_file).parent if self.source_file else Path.cwd()
        path = Path(value)
        return path if path.is_absolute() else (base / path).resolve()


_LAKE_TYPES = ("hadoop", "rest", "jdbc", "hive")


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
              "SensorConfig": SensorConfig}
    if typ in nested:
        return _build(nested[typ], raw, path, file)
    if typ == "tuple[DatamartConfig, ...]":
        if not isinstance(raw, list) or not raw:
            raise ConfigError(path, "must be a non-empty list of datamarts", file)
        items = tuple(_build(DatamartConfig, item, f"{path}[{i}]", file) for i, item in enumerate(raw))
        names = [d.name for d in items]
        if len(set(names)) != len(names):
            raise ConfigError(path, f"datamart names must be unique, got {names}", file)
        return items
    if typ == "dict":
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
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw <= 0:
            raise ConfigError(path, f"must be a positive number, got {raw!r}", file)
        return int(raw) if typ == "int" else float(raw)
    raise ConfigError(path, f"unsupported type {typ}", file)  # a bug in this module, not in the file


def parse_config(raw: Any, file: str | None = None) -> PlatformConfig:
    cfg = _build(PlatformConfig, raw or {}, "", file)
    if cfg.lake.type not in _LAKE_TYPES:
        raise ConfigError("lake.type", f"must be one of {', '.join(_LAKE_TYPES)}, got {cfg.lake.type!r}", file)
    if cfg.lake.type in ("rest", "jdbc", "hive") and not cfg.lake.uri:
        raise ConfigError("lake.uri", f"is required for a {cfg.lake.type} catalog", file)
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


def resolve_secret(value: Any) -> Any:
    """`{env: NAME}` -> the value of $NAME (read now); anything else as is."""
    if isinstance(value, dict) and set(value) == {"env"}:
        name = value["env"]
        if name not in os.environ:
            raise ConfigError(f"env:{name}", "environment variable is not set")
        return os.environ[name]
    return value
