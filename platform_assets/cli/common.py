"""What the sub-commands share: finding the Kafka broker, a progress bar on stderr, a
JVM-free read that does not import pandas (`without_pandas`), and the garbage collector of a
short command's process (`short_lived_collector`)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time
from pathlib import Path

from resources.errors import DeltaportError

STATE_DIR_ENV = "DELTAPORT_STATE_DIR"


def state_dir() -> Path:
    """Where `deltaport broker start` keeps the embedded broker's data and address."""
    return Path(os.environ.get(STATE_DIR_ENV, ".deltaport"))


def broker_state_file() -> Path:
    return state_dir() / "broker.json"


def add_bootstrap_option(parser) -> None:
    parser.add_argument(
        "--bootstrap-servers", "-b", default=None,
        help="Kafka bootstrap servers; default: $KAFKA_BOOTSTRAP_SERVERS, else the broker "
             "started by `deltaport broker start`",
    )


def resolve_bootstrap(args) -> str:
    if args.bootstrap_servers:
        return args.bootstrap_servers
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    state = broker_state_file()
    if state.exists():
        return json.loads(state.read_text())["bootstrap_servers"]
    raise DeltaportError(
        "no Kafka broker given: pass --bootstrap-servers, set KAFKA_BOOTSTRAP_SERVERS, "
        "or start the embedded one with `deltaport broker start`"
    )


class Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str, *, enabled: bool | None = None):
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        width = 30
        frac = done / total if total else 1.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        rate = done / max(time.monotonic() - self.started, 1e-6)
        sys.stderr.write(f"\r{self.label} [{bar}] {done}/{total} ({rate:,.0f} msg/s)")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def add_config_option(parser) -> None:
    parser.add_argument("--config", "-c", default=None,
                        help="config file (default: $DELTAPORT_CONFIG, else ./deltaport.yaml)")


def ensure_dagster_home() -> Path:
    """$DAGSTER_HOME if set; else ./.dagster, with the project's dagster.yaml linked into it."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    home = Path(".dagster").resolve()
    home.mkdir(parents=True, exist_ok=True)
    link, source = home / "dagster.yaml", Path("dagster.yaml").resolve()
    if source.exists() and not link.exists():
        link.symlink_to(source)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def on_instance(args, work):
    """`work(cfg, instance)` on the config of `--config` and the Dagster instance of $DAGSTER_HOME
    (./.dagster by default); what `sync` and `status` share."""
    import dagster as dg  # imported here: every `deltaport` command imports this module, and Dagster takes a second

    from platform_assets.config import load_config

    cfg = load_config(args.config)
    ensure_dagster_home()
    with dg.DagsterInstance.get() as instance:
        return work(cfg, instance)


class _NoPandas:
    """An import finder for which pandas does not exist."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r} (this deltaport command reads without it)", name=name)
        return None


@contextlib.contextmanager
def without_pandas():
    """pandas left unimported by a JVM-free read (`sql` on DuckDB, `read --engine pyiceberg`):
    pyarrow's dataset module (PyIceberg's scans) and DuckDB's `register` import it whenever it is
    installed (pyspark[connect] installs it), only to ask whether an object is a DataFrame, and
    both take its absence as "no"; the import is ~0.3 s of a read's 1 s on 2 cores. A process
    that has imported pandas already keeps it."""
    if "pandas" in sys.modules:
        yield
        return
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


@contextlib.contextmanager
def short_lived_collector():
    """Python's cyclic garbage collector off while a short command runs as its own process
    (`deltaport sql`), and what the command made frozen when it ends. Such a command imports about
    100k objects (PyIceberg's pydantic models, sqlglot, pyarrow) that live until the process ends:
    the collector's passes over them while they are imported, and the interpreter's own pass at
    exit, free almost nothing (4k of 102k objects) and were 0.10-0.15 s of the CPU of a 0.75 s
    `deltaport sql` on DuckDB. Reference counting still frees everything as the command goes
    (Arrow's buffers included); only cycles wait, and the process ends right after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # the collections left (at exit) skip everything the command made
        if enabled:
            gc.enable()
