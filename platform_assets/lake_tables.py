"""Each lake table of a multi-table source as an entry of its own in the Dagster catalog, found by its name.

What flows through: a source's table list, {table: [(column, type), ...]}, as its snapshot step
saw it (the delta's changelog). The step keeps it in Dagster's defs state storage (the
instance's `defs_state_storage`: one versioned file per source, by default under
$DAGSTER_HOME/defs_state, its latest version named in the run storage), the mechanism
Dagster's own state-backed integrations use. When the code location loads it reads the list and
declares one external asset per table: key `[<source>, "tables", <table>]`, downstream of the
source's snapshot, in group `<source>_tables`, kind iceberg, with Dagster's table metadata
(`dagster/table_name`, `dagster/column_schema`: the Columns pane, `dagster/uri` where known) and
the `deltaport/table` tag.

Why an asset key: Dagster OSS's catalog search matches asset keys only (typing `sales` in its
box selects `key:"*sales*"`); descriptions, metadata, `dagster/table_name` and column names are
not searched (`table_name:` and `column:` are Dagster+ filters). A table is found by its name
only if its name is in an asset key.

Guarantees:
- No run waits for a reload. The table assets are external (no materialization function, in
  no job): a delta that creates a table lands it whether or not its asset exists; the asset
  appears at the code location's next load (the UI's "Reload definitions").
- No event per delta. Nothing materializes the table assets; the step writes the list only when
  it differs from the one its definitions were built from and from the latest stored (a DDL
  change, or a first delta): a steady delta reads and writes nothing.
- The code location always loads: no storage, no state yet, or an unreadable one gives no table
  assets and a warning, never a load error; neither the lake nor deltaport's state store is
  asked at load.
- A run's definitions are the UI's: Dagster pins the version the code server loaded, and the
  run's worker reads that one.
- Keeping the list never fails a step: a failed write is a warning, and the next delta tries again.
"""

from __future__ import annotations

import json
import logging
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import dagster as dg
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext
from dagster._core.storage.defs_state.base import DefsStateStorage
from dagster.components.utils.defs_state import DefsStateConfig
from dagster_shared.serdes.objects.models.defs_state_info import DefsStateManagementType

from platform_assets.delta_metadata import table_metadata, table_tags

Tables = dict[str, list[tuple[str, str]]]  # {table: [(column, type), ...]}

_FORMAT = 1
_log = logging.getLogger(__name__)


def state_key(source: str) -> str:
    return f"deltaport/{source}/lake_tables"


def table_key(source: str, table: str) -> dg.AssetKey:
    return dg.AssetKey([source, "tables", table])


def tables_group(source: str) -> str:
    return f"{source}_tables"


def encode(tables: Mapping[str, list[tuple[str, str]]], delta: int) -> str:
    """The stored form: the tables as of `delta`, sorted by table, columns in their order."""
    return json.dumps({"format": _FORMAT, "delta": delta,
                       "tables": {t: [list(c) for c in cols] for t, cols in sorted(tables.items())}},
                      separators=(",", ":"))


def decode(text: str) -> tuple[int, Tables]:
    """`encode`'s inverse, (delta, tables); a list in another format reads as no tables as of
    no delta (-1: written by a later deltaport)."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return -1, {}
    return int(data["delta"]), {t: [(str(n), str(ty)) for n, ty in cols] for t, cols in data["tables"].items()}


def _same(a: Mapping[str, list[tuple[str, str]]], b: Mapping[str, list[tuple[str, str]]]) -> bool:
    return {t: [tuple(c) for c in cols] for t, cols in a.items()} == {t: [tuple(c) for c in cols] for t, cols in b.items()}


def merged(known: Mapping[str, list[tuple[str, str]]], seen: Mapping[str, list[tuple[str, str]] | None],
           tables: set[str] | None = None) -> Tables:
    """A change stream's list: its tables (`tables`, else those of `known` and `seen`), each with
    the columns the run `seen` (None or empty: not known this run) or else those `known`."""
    names = set(known) | set(seen) if tables is None else tables
    return {t: list(seen.get(t) or known.get(t) or []) for t in sorted(names)}


def _config(source: str) -> DefsStateConfig:
    return DefsStateConfig(key=state_key(source), management_type=DefsStateManagementType.VERSIONED_STATE_STORAGE,
                           refresh_if_dev=False)


def load_tables(source: str) -> Tables:
    """The source's table list as the code location loads it (module docstring): {} when there
    is no storage or no list, or it cannot be read (warned)."""
    storage = DefsStateStorage.get()
    if storage is None:
        return {}
    try:
        with DefinitionsLoadContext.get().state_path(_config(source), storage, Path.cwd()) as path:
            return decode(path.read_text(encoding="utf-8"))[1] if path is not None else {}
    except Exception as exc:  # the catalog's table entries are a nicety: the location must load without them
        _log.warning("source %s: its lake tables' list could not be read (%s: %s); the catalog lists no table "
                     "assets of it until a later load reads one", source, type(exc).__name__, exc)
        return {}


def table_specs(source: str, tables: Mapping[str, list[tuple[str, str]]], *, upstream: dg.AssetKey,
                ident: Callable[[str], str], uri: Callable[[str], str | None] | None = None) -> list[dg.AssetSpec]:
    """One external asset per table: `ident(table)` is its Iceberg table, `upstream` the asset
    that writes it (the snapshot)."""
    return [dg.AssetSpec(table_key(source, t), deps=[upstream], group_name=tables_group(source), kinds={"iceberg"},
                         metadata=table_metadata(ident(t), [tuple(c) for c in cols], uri=uri),
                         tags=table_tags(ident(t)),
                         description=f"Iceberg table {ident(t)}: {source}'s table {t} as of its last landed delta, "
                                     f"written by {upstream.to_user_string()} (its `tables` entry counts each delta's "
                                     "changes). Not materialized on its own: listed so that the catalog "
                                     "finds it by name and shows its columns; a table created since the code "
                                     "location loaded appears after \"Reload definitions\".")
            for t, cols in sorted(tables.items())]


def _latest(storage: DefsStateStorage, key: str) -> tuple[int, Tables | None]:
    """The latest stored list, or (-1, None) when there is none this host can read: a version
    stored from another host on a local folder (storage not shared) is written again here, so
    that the runs on this host find theirs and stop writing, rather than warn on every delta."""
    latest = storage.get_latest_version(key)
    if latest is None:
        return -1, None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "state"
            storage.download_state_to_path(key, latest, path)
            return decode(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - unreadable here: as if none were stored
        return -1, None


def remember_tables(context: dg.AssetExecutionContext, source: str,
                    tables: Mapping[str, list[tuple[str, str]]] | Callable[[Tables], Tables],
                    known: Mapping[str, list[tuple[str, str]]], *, delta: int) -> str | None:
    """Store `tables` (as of `delta`) as the source's list when it differs from `known` (what the
    definitions were built from) and from the latest stored one, unless that one is of a later
    delta (a re-run of an old partition leaves the newer list). `tables` may be a function of the
    list it updates (`known`, then the latest stored): a change stream's run sees only some of its
    tables. Returns what it stored, for the step's one log line (a log line of its own would be
    an event), or None. Never raises."""
    build = tables if callable(tables) else (lambda _base: dict(tables))
    wanted, base = build(known), dict(known)
    if _same(wanted, known):
        return None
    try:
        storage = context.instance.defs_state_storage
        if storage is None:
            return None
        key = state_key(source)
        stored_delta, stored = _latest(storage, key)
        if stored is not None:
            wanted, base = build(stored), stored
            if _same(stored, wanted) or stored_delta > delta:
                return None  # stored by an earlier run (the code location has not reloaded since), or newer
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "state"
            path.write_text(encode(wanted, delta), encoding="utf-8")
            storage.upload_state_from_path(key, version=str(uuid.uuid4()), path=path)
    except Exception as exc:
        context.log.warning(f"source {source}: its lake tables' list was not stored ({type(exc).__name__}: {exc}); "
                            "the next delta tries again")
        return None
    added, gone = sorted(set(wanted) - set(base)), sorted(set(base) - set(wanted))
    return (f"{len(wanted)} lake tables stored for the catalog" + (f" (new: {', '.join(added)})" if added else "")
            + (f" (gone: {', '.join(gone)})" if gone else "") + ": \"Reload definitions\" lists them")
