"""Opens deltaport's Dagster UI in headless Chromium, screenshots it, and checks what it shows.

Given a Dagster instance (DAGSTER_HOME), a workspace file and a deltaport config (DELTAPORT_CONFIG)
that already hold landed deltas (e.g. after `deltaport demo --once`), this:

1. starts `dagster-webserver -w <workspace> -h 127.0.0.1 -p <free port>` (log in
   <out>/webserver.log) and waits until /server_info answers and the code location has loaded;
2. asks the GraphQL API (POST /graphql) for the lineage (every asset's dependency keys: snapshot
   <- changelog, increment; increment <- changelog, kafka/<backup topic>; changelog <-
   kafka/<backup topic>; signal_events <- kafka/<signal topic>) and the partitions of the
   datamart's partitioned assets (dynamic `<datamart>_deltas`, landed keys materialized);
3. opens four pages in headless Chromium (Debian's `chromium`), saves a PNG of each and a dump
   of its rendered DOM (one Chromium a page: the PNG and the DOM are of the same render), and
   checks that each PNG is not blank (decoded with the stdlib: many colours, not one flat
   background) and that each DOM names what the page must show:
     lineage.png              /asset-groups                              the global asset lineage (groups)
     asset-group-<dm>.png     /locations/<location>/asset-groups/<dm>    the datamart's asset graph
     <dm>-snapshot-partitions.png
                              /assets/<dm>/snapshot?view=partitions&partition=<last key>
     <dm>-<mart>-lineage.png  /assets/<dm>/<mart>?view=lineage&lineageScope=upstream&lineageDepth=3
                              the first `code:` asset of the datamart (the demo's sales_by_store)
                              drawn below the snapshot, the increment, the changelog and the topic
     <dm>-signal_events-columns.png
                              /assets/<dm>/signal_events?view=overview   a lake table's Columns pane: every
                              column of its `dagster/column_schema` (asked of GraphQL first)
     catalog-table-search.png /assets?asset-selection=tag:"deltaport/table"="<its Iceberg table>"
                              the catalog searched for the table's name: the asset, not its neighbours
     <dm>-tables-sales-columns.png
                              /assets/<dm>/tables/sales?view=overview    a datamart table's own asset: its columns
     catalog-search-sales.png /assets?asset-selection=key:"*sales*"      what typing `sales` in the catalog's
                              search box selects: lists <dm>/tables/sales
4. stops the webserver (in `finally`).

Dagster shows a "Join the Dagster community" dialog over every page of a fresh instance opened on
localhost; it is dismissed first with the UI's own `setNuxSeen` mutation (what its Skip button
does: it writes $DAGSTER_HOME/.nux/nux.yaml), otherwise it would cover the screenshots.

Usage (after `deltaport demo --once`; with no argument it looks in $DELTAPORT_STATE_DIR/demo,
else .deltaport/demo):

    .venv/bin/python tests/ui/ui_check.py [--demo-dir DIR | --dagster-home D --workspace W --config C]
                                          [--out bench-results/ui] [--datamart marketing]
                                          [--expect-partitions 00000000,00000001,00000002]

Importable: `run_ui_check(...)` returns a `UICheckResult` or raises `UICheckError` (an
AssertionError) saying what is missing; `ChromiumNotFound` when Debian's chromium is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from png_stats import PNGError, image_stats

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = PROJECT_ROOT / "bench-results" / "ui"
CHROMIUM_ENV = "DELTAPORT_CHROMIUM"  # path of another chromium binary, if not /usr/bin/chromium
INSTALL_HINT = ("Debian's chromium is needed for the UI check: install it with "
                "`apt-get update && apt-get install -y chromium` (as root; the Makefile does this), "
                f"or point ${CHROMIUM_ENV} at a chromium binary")
# Headless Chromium on a machine without internet: without the background-networking flags it
# hangs retrying refused connections; a new empty profile per run keeps runs independent.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
WINDOW = (1600, 1000)
VIRTUAL_TIME_BUDGET_MS = 15000


class UICheckError(AssertionError):
    """The UI does not show what it must (or could not be started); the message says what."""


class ChromiumNotFound(UICheckError):
    pass


@dataclass
class Page:
    name: str
    url: str
    screenshot: str
    dom: str
    png_bytes: int = 0
    colours: int = 0  # distinct colours on a sampling grid
    non_background: float = 0.0  # share of sampled pixels that differ from the most common colour
    must_show: list[str] = field(default_factory=list)
    must_not_show: list[str] = field(default_factory=list)  # what a filtered page must have left out
    min_non_background: float = 0.03  # a page that is one short list by design has less drawn on it


@dataclass
class UICheckResult:
    base_url: str
    location: str
    datamart: str
    lineage: dict[str, list[str]]  # asset key -> its dependency keys ("a/b" strings)
    partition_keys: list[str]
    materialized_partitions: dict[str, list[str]]  # partitioned asset of the datamart -> its materialized keys
    check_statuses: dict[str, str]  # "asset/key:check" -> its latest execution's status
    lake_table: dict[str, list[str]]  # the signal events' Iceberg table -> its columns, as the catalog has them
    datamart_table: dict[str, list[str]]  # a datamart table's Iceberg table -> its columns, from its own asset
    pages: list[Page]
    out_dir: str
    seconds: float

    def summary(self) -> str:
        lines = [f"UI at {self.base_url} (code location {self.location!r}), datamart {self.datamart!r}: "
                 f"{len(self.lineage)} assets, partitions {', '.join(self.partition_keys)}"]
        for key in sorted(self.lineage):
            if self.lineage[key]:
                lines.append(f"  {key} <- {', '.join(self.lineage[key])}")
        for asset, keys in sorted(self.materialized_partitions.items()):
            lines.append(f"  {asset}: {len(keys)} materialized partitions")
        by_status: dict[str, int] = {}
        for status in self.check_statuses.values():
            by_status[status] = by_status.get(status, 0) + 1
        lines.append(f"  asset checks: {by_status}")
        for p in self.pages:
            lines.append(f"  {p.screenshot}  <- {p.url}  ({p.png_bytes} bytes, {p.colours} colours, "
                         f"{p.non_background:.0%} non-background)")
        lines.append(f"  {self.seconds:.1f} s")
        return "\n".join(lines)


# ---------------------------------------------------------------- chromium


def find_chromium() -> str:
    """Debian's chromium (or $DELTAPORT_CHROMIUM); ChromiumNotFound with how to install it."""
    chosen = os.environ.get(CHROMIUM_ENV)
    if chosen:
        if not (Path(chosen).is_file() and os.access(chosen, os.X_OK)):
            raise ChromiumNotFound(f"${CHROMIUM_ENV}={chosen} is not an executable file. {INSTALL_HINT}")
        return chosen
    found = shutil.which("chromium")
    if not found:
        raise ChromiumNotFound(f"`chromium` is not on PATH. {INSTALL_HINT}")
    return found


def _run_chromium(chromium: str, args: list[str], *, timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="deltaport-chromium-") as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc, signal.SIGKILL)
            proc.communicate()
            raise UICheckError(f"chromium did not finish within {timeout:.0f} s: {' '.join(cmd)}") from None
        finally:
            _kill_group(proc, signal.SIGKILL)  # renderer/GPU helpers left behind, if any
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def render(chromium: str, url: str, png: Path, *, budget_ms: int = VIRTUAL_TIME_BUDGET_MS,
           timeout: float = 120) -> str:
    """One headless Chromium on `url`: once the virtual time budget is spent, a PNG of the page in
    `png` and its rendered DOM (returned), both of the same render."""
    png.unlink(missing_ok=True)
    res = _run_chromium(chromium, ["--dump-dom", f"--screenshot={png}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                                   f"--virtual-time-budget={budget_ms}", url], timeout=timeout)
    if res.returncode != 0 or not png.exists():
        raise UICheckError(f"chromium wrote no screenshot and DOM of {url} (exit {res.returncode}):\n"
                           f"{_tail(res.stderr.decode(errors='replace'))}")
    return res.stdout.decode("utf-8", errors="replace")


def check_not_blank(page: Page, *, min_colours: int = 24, min_non_background: float = 0.03) -> None:
    png = Path(page.screenshot)
    page.png_bytes = png.stat().st_size
    try:
        page.colours, page.non_background = image_stats(png)
    except PNGError as exc:
        raise UICheckError(f"screenshot {png} of {page.url}: {exc}") from exc
    if page.colours < min_colours or page.non_background < min_non_background:
        raise UICheckError(f"screenshot {png} of {page.url} looks blank: {page.colours} colours, "
                           f"{page.non_background:.1%} of it unlike the background "
                           f"(want >= {min_colours} colours and >= {min_non_background:.0%})")


# ---------------------------------------------------------------- webserver + GraphQL


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _log_tail(log: Path, lines: int = 40) -> str:
    try:
        return _tail(log.read_text(errors="replace"), lines)
    except OSError:
        return "(no log)"


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _webserver_bin() -> str:
    beside = Path(sys.executable).with_name("dagster-webserver")
    if beside.exists():
        return str(beside)
    found = shutil.which("dagster-webserver")
    if not found:
        raise UICheckError("dagster-webserver not found (beside this Python or on PATH): `make install`")
    return found


class Webserver:
    """`dagster-webserver` in its own process group; `stop()` ends the group (code server included)."""

    def __init__(self, *, workspace: Path, dagster_home: Path, config: Path, log: Path, port: int | None = None):
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "DELTAPORT_CONFIG": str(config)}
        cmd = [_webserver_bin(), "-w", str(workspace), "-h", "127.0.0.1", "-p", str(self.port)]
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            out.write(f"$ {' '.join(cmd)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(cmd, cwd=workspace.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout: float) -> str:
        """Waits for /server_info, then for the code location to load; returns the location's name."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise UICheckError(f"dagster-webserver exited with {self.proc.returncode} before answering; "
                                   f"{self.log}:\n{_log_tail(self.log)}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/server_info", timeout=5) as resp:
                    json.loads(resp.read())
                break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise UICheckError(f"dagster-webserver did not answer /server_info within {timeout:.0f} s; "
                                   f"{self.log}:\n{_log_tail(self.log)}")
            time.sleep(0.5)
        query = ("{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus "
                 "locationOrLoadError { __typename ... on PythonError { message } } } } } }")
        while True:
            entries = self.graphql(query)["workspaceOrError"].get("locationEntries") or []
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                errors = [f"{e['name']}: {e['locationOrLoadError'].get('message', '').strip()}" for e in entries
                          if (e["locationOrLoadError"] or {}).get("__typename") == "PythonError"]
                if errors:
                    raise UICheckError("the code location failed to load:\n" + "\n".join(errors))
                if len(entries) != 1:
                    raise UICheckError(f"expected one code location, got {[e['name'] for e in entries]}")
                return entries[0]["name"]
            if time.monotonic() > deadline:
                raise UICheckError(f"the code location did not load within {timeout:.0f} s: {entries}; "
                                   f"{self.log}:\n{_log_tail(self.log)}")
            time.sleep(0.5)

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        req = urllib.request.Request(f"{self.base_url}/graphql", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                payload = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise UICheckError(f"GraphQL answered HTTP {exc.code}: {exc.read()[:2000]!r}") from exc
        if payload.get("errors"):
            raise UICheckError(f"GraphQL errors: {json.dumps(payload['errors'])[:2000]}")
        return payload["data"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(self.proc, signal.SIGKILL)  # the code server child, if it outlived the webserver
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)


# ---------------------------------------------------------------- the checks


def _key(path: list[str]) -> str:
    return "/".join(path)


def expected_lineage(datamart: str, signal_topic: str, backup_topic: str) -> dict[str, set[str]]:
    backup, sig = f"kafka/{backup_topic}", f"kafka/{signal_topic}"
    return {
        f"{datamart}/signal_events": {sig},
        f"{datamart}/changelog": {backup},
        f"{datamart}/increment": {f"{datamart}/changelog", backup},
        f"{datamart}/snapshot": {f"{datamart}/changelog", f"{datamart}/increment"},
    }


def stream_lineage(config: Path) -> dict[str, set[str]]:
    """The lineage of every change-stream source (Qlik, DataWorks, Datastream) of the config."""
    from platform_assets.config import load_config

    out: dict[str, set[str]] = {}
    for s in load_config(config).streams:
        topic = f"kafka/{s.topic}"
        out.update({f"{s.name}/changelog": {topic}, f"{s.name}/increment": {f"{s.name}/changelog", topic},
                    f"{s.name}/snapshot": {f"{s.name}/changelog", f"{s.name}/increment"}})
    return out


def user_lineage(config: Path) -> dict[str, set[str]]:
    """The config's own assets (`code:`, @delta_asset): each below its source's snapshot."""
    from platform_assets.build_on import load_user_code
    from platform_assets.config import load_config

    assets, _ = load_user_code(load_config(config))
    return {a.key().to_user_string(): {f"{a.source}/snapshot"} for a in assets}


def _datamart_topics(config: Path, datamart: str) -> tuple[str, str]:
    from platform_assets.config import load_config

    cfg = load_config(config)
    for dm in cfg.datamarts:
        if dm.name == datamart:
            return dm.signal_topic, dm.backup_topic
    raise UICheckError(f"datamart {datamart!r} is not in {config} (has {[d.name for d in cfg.datamarts]})")


def check_lineage(ws: Webserver, datamart: str, signal_topic: str, backup_topic: str,
                  streams: dict[str, set[str]] | None = None) -> dict[str, list[str]]:
    """The datamart's lineage (and `streams`' lineage, from `stream_lineage`) as the UI serves it."""
    nodes = ws.graphql("{ assetNodes { assetKey { path } groupName dependencyKeys { path } } }")["assetNodes"]
    lineage = {_key(n["assetKey"]["path"]): sorted(_key(d["path"]) for d in n["dependencyKeys"]) for n in nodes}
    groups = {_key(n["assetKey"]["path"]): n["groupName"] for n in nodes}
    problems = []
    for asset, deps in {**expected_lineage(datamart, signal_topic, backup_topic), **(streams or {})}.items():
        if asset not in lineage:
            problems.append(f"asset {asset} is missing")
            continue
        group = asset.split("/", 1)[0]  # every source is its own group
        if groups[asset] != group:
            problems.append(f"asset {asset} is in group {groups[asset]!r}, not {group!r}")
        if missing := deps - set(lineage[asset]):
            problems.append(f"{asset} does not depend on {sorted(missing)} (its dependencies: {lineage[asset]})")
    for topic in (signal_topic, backup_topic):
        if groups.get(f"kafka/{topic}", "(missing)") != "kafka":
            problems.append(f"source asset kafka/{topic} is not in group 'kafka' ({groups.get(f'kafka/{topic}', 'missing')})")
    if problems:
        raise UICheckError("lineage in the UI's GraphQL API is wrong:\n  " + "\n  ".join(problems))
    return lineage


CHECKS_QUERY = """
{ assetNodes { assetKey { path } assetChecksOrError { __typename ... on AssetChecks { checks { name } } } } }"""
LATEST_EXECUTION_QUERY = """
query Latest($path: [String!]!, $name: String!) {
  assetCheckExecutions(assetKey: {path: $path}, checkName: $name, limit: 1) { status runId partition }
}"""


def check_asset_checks(ws: Webserver) -> dict[str, str]:
    """Every asset check the UI lists and the status of its latest execution ("NOT_EVALUATED" when
    it has none); raises unless each evaluated one passed and every source's lag check was
    evaluated: a healthy demo shows no red."""
    statuses, problems = {}, []
    for node in ws.graphql(CHECKS_QUERY)["assetNodes"]:
        found = node["assetChecksOrError"]
        for check in (found.get("checks") or []) if found["__typename"] == "AssetChecks" else []:
            latest = ws.graphql(LATEST_EXECUTION_QUERY, {"path": node["assetKey"]["path"], "name": check["name"]})
            runs = latest["assetCheckExecutions"]
            name = f"{_key(node['assetKey']['path'])}:{check['name']}"
            statuses[name] = runs[0]["status"] if runs else "NOT_EVALUATED"
            if runs and runs[0]["status"] != "SUCCEEDED":
                problems.append(f"{name}: {runs[0]}")
    if not [n for n in statuses if n.endswith(":lag_within_bound") and statuses[n] == "SUCCEEDED"]:
        problems.append("no source's lag_within_bound has passed")
    if problems:
        raise UICheckError("asset checks the UI shows have not passed:\n  " + "\n  ".join(problems))
    return statuses


TABLE_QUERY = """
query Table($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    __typename
    ... on AssetNode {
      metadataEntries {
        label
        ... on TextMetadataEntry { text }
        ... on TableSchemaMetadataEntry { schema { columns { name type } } }
      }
    }
  }
}"""


def check_lake_table(ws: Webserver, path: list[str]) -> tuple[str, list[str]]:
    """A single-table asset's Iceberg table as the catalog knows it: its `dagster/table_name` and
    the columns of its `dagster/column_schema` (what the Columns pane lists)."""
    node = ws.graphql(TABLE_QUERY, {"path": path})["assetNodeOrError"]
    if node["__typename"] != "AssetNode":
        raise UICheckError(f"asset {_key(path)}: {node['__typename']}")
    entries = {e["label"]: e for e in node["metadataEntries"]}
    name = (entries.get("dagster/table_name") or {}).get("text")
    columns = [c["name"] for c in ((entries.get("dagster/column_schema") or {}).get("schema") or {}).get("columns", [])]
    if not name or not columns:
        raise UICheckError(f"asset {_key(path)} has no dagster/table_name or no dagster/column_schema: "
                           f"{sorted(entries)}")
    return name, columns


def lake_table_pages(base: str, datamart: str, table: str, columns: list[str], out: Path) -> list[Page]:
    """The signal events' page (its Overview: the Columns pane lists every column of the table), and
    the asset catalog searched for the Iceberg table's name, which must list the asset and not the
    datamart's other assets. By its `deltaport/table` tag: Dagster OSS answers a `table_name:`
    selection with "table_name filtering is available in Dagster+"."""
    asset = f"{datamart}/signal_events"
    selection = urllib.parse.urlencode({"asset-selection": f'tag:"deltaport/table"="{table}"'})
    return [
        Page("columns", f"{base}/assets/{asset}?view=overview", str(out / f"{datamart}-signal_events-columns.png"),
             str(out / f"{datamart}-signal_events-columns.html"),
             must_show=["Columns", *(f">{c}</span>" for c in columns)]),  # each a cell of its own
        Page("table-search", f"{base}/assets?{selection}", str(out / "catalog-table-search.png"),
             str(out / "catalog-table-search.html"), must_show=[f'href="/assets/{asset}"'],
             must_not_show=[f'href="/assets/{datamart}/increment"', f'href="/assets/{datamart}/changelog"'],
             min_non_background=0.01),
    ]


def datamart_table_pages(base: str, datamart: str, table: str, columns: list[str], out: Path) -> list[Page]:
    """A datamart table's own asset (`<dm>/tables/<table>`, platform_assets/lake_tables.py): its
    Overview's Columns pane, and the catalog searched for the table's name as a user types it:
    the catalog's search box turns a plain `sales` into `key:"*sales*"` (Dagster OSS matches asset
    keys only), so that selection is the URL's. It must list the table's asset, not the layer
    assets whose keys do not name it."""
    asset = f"{datamart}/tables/{table}"
    selection = urllib.parse.urlencode({"asset-selection": f'key:"*{table}*"'})
    return [
        Page("datamart-table-columns", f"{base}/assets/{asset}?view=overview",
             str(out / f"{datamart}-tables-{table}-columns.png"), str(out / f"{datamart}-tables-{table}-columns.html"),
             must_show=["Columns", *(f">{c}</span>" for c in columns)]),
        Page("datamart-table-search", f"{base}/assets?{selection}", str(out / f"catalog-search-{table}.png"),
             str(out / f"catalog-search-{table}.html"), must_show=[f'href="/assets/{asset}"'],
             must_not_show=[f'href="/assets/{datamart}/increment"', f'href="/assets/{datamart}/snapshot"'],
             min_non_background=0.01),
    ]


PARTITIONS_QUERY = """
query Partitions($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    __typename
    ... on AssetNode {
      isPartitioned
      partitionKeys
      partitionDefinition { type name dimensionTypes { dynamicPartitionsDefinitionName } }
      partitionStats { numMaterialized numPartitions numFailed }
      assetPartitionStatuses { __typename ... on DefaultPartitionStatuses { materializedPartitions failedPartitions } }
    }
  }
}"""


def check_partitions(ws: Webserver, datamart: str, expected: list[str] | None) -> tuple[list[str], dict[str, list[str]]]:
    """Every asset of the datamart is partitioned by `<datamart>_deltas`, with materialized partitions
    (all of `expected`, when given); returns the snapshot's partition keys and the materialized keys."""
    problems, materialized, snapshot_keys = [], {}, []
    for name in ("signal_events", "changelog", "increment", "snapshot", "history"):
        asset = f"{datamart}/{name}"
        node = ws.graphql(PARTITIONS_QUERY, {"path": [datamart, name]})["assetNodeOrError"]
        if node["__typename"] != "AssetNode":
            problems.append(f"{asset}: {node['__typename']}")
            continue
        if not node["isPartitioned"]:
            problems.append(f"{asset} is not partitioned")
            continue
        pdef = node["partitionDefinition"] or {}
        dyn = [d["dynamicPartitionsDefinitionName"] for d in pdef.get("dimensionTypes") or []]
        if pdef.get("type") != "DYNAMIC" or f"{datamart}_deltas" not in dyn:
            problems.append(f"{asset} is partitioned by {pdef}, not by dynamic partitions {datamart}_deltas")
        keys = node["partitionKeys"] or []
        done = (node["assetPartitionStatuses"] or {}).get("materializedPartitions") or []
        stats = node["partitionStats"] or {}
        materialized[asset] = list(done)
        if name == "snapshot":
            snapshot_keys = list(keys)
        if not keys:
            problems.append(f"{asset} has no partition keys")
        if not stats.get("numMaterialized"):
            problems.append(f"{asset} has no materialized partition (stats {stats})")
        if expected:
            if missing := [k for k in expected if k not in keys]:
                problems.append(f"{asset}: partition keys {missing} missing (has {keys})")
            if missing := [k for k in expected if k not in done]:
                problems.append(f"{asset}: partitions {missing} not materialized (materialized: {done})")
    if problems:
        raise UICheckError("partitions in the UI's GraphQL API are wrong:\n  " + "\n  ".join(problems))
    return snapshot_keys, materialized


def dismiss_community_dialog(ws: Webserver) -> None:
    ws.graphql("mutation { setNuxSeen }")
    if ws.graphql("{ shouldShowNux }")["shouldShowNux"]:
        raise UICheckError("the 'Join the Dagster community' dialog is still due after setNuxSeen")


def check_page(chromium: str, page: Page) -> None:
    """Screenshot + DOM of one page: not blank, names everything in `page.must_show`, no dialog over it.
    A page that has not rendered yet within the virtual time budget gets one more try with more time."""
    for attempt, budget in enumerate((VIRTUAL_TIME_BUDGET_MS, 3 * VIRTUAL_TIME_BUDGET_MS)):
        dom = render(chromium, page.url, Path(page.screenshot), budget_ms=budget)
        Path(page.dom).write_text(dom, encoding="utf-8")
        missing = [text for text in page.must_show if text not in dom]
        missing += [f"(not {text})" for text in page.must_not_show if text in dom]
        if "Join the Dagster community" in dom:
            missing.append("(no 'Join the Dagster community' dialog)")
        try:
            check_not_blank(page, min_non_background=page.min_non_background)
        except UICheckError:
            if attempt:
                raise
            continue
        if not missing:
            return
        if attempt:
            raise UICheckError(f"{page.url} (DOM in {page.dom}) does not show {missing}")


def mart_lineage_pages(base: str, datamart: str, users: dict[str, set[str]], backup_topic: str,
                       out: Path) -> list[Page]:
    """The lineage tab of the datamart's first own asset (`code:`), three steps upstream: topic ->
    changelog, increment -> snapshot -> mart. The DOM must hold a graph node (its `data-tooltip`
    label) for each of the five, so a mart not drawn below the snapshot fails; and the mart's node
    must read "100% filled": every delta partition of it materialized."""
    marts = sorted(k for k in users if k.startswith(f"{datamart}/"))
    if not marts:
        return []
    mart = marts[0]
    query = urllib.parse.urlencode({"view": "lineage", "lineageScope": "upstream", "lineageDepth": 3})
    name = mart.replace("/", "-")
    nodes = [mart.split("/", 1)[1], "snapshot", "increment", "changelog", backup_topic]
    return [Page("mart-lineage", f"{base}/assets/{urllib.parse.quote(mart)}?{query}",
                 str(out / f"{name}-lineage.png"), str(out / f"{name}-lineage.html"),
                 must_show=[*(f'data-tooltip="{n}"' for n in nodes),
                            f'href="/assets/{mart}?view=partitions">100% filled<'])]


def run_ui_check(*, dagster_home: str | os.PathLike, workspace: str | os.PathLike, config: str | os.PathLike,
                 out_dir: str | os.PathLike = DEFAULT_OUT, datamart: str = "marketing",
                 expected_partitions: list[str] | None = None, port: int | None = None, datamart_table: str = "sales",
                 startup_timeout: float = 180) -> UICheckResult:
    started = time.monotonic()
    chromium = find_chromium()  # before starting anything: say how to install it first
    dagster_home, workspace, config = Path(dagster_home).resolve(), Path(workspace).resolve(), Path(config).resolve()
    for what, path in (("DAGSTER_HOME", dagster_home), ("workspace", workspace), ("config", config)):
        if not path.exists():
            raise UICheckError(f"{what} {path} does not exist (run `deltaport demo --once` first?)")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    signal_topic, backup_topic = _datamart_topics(config, datamart)

    ws = Webserver(workspace=workspace, dagster_home=dagster_home, config=config, log=out / "webserver.log", port=port)
    try:
        location = ws.wait_ready(startup_timeout)
        users = user_lineage(config)  # the demo's marketing/sales_by_store: topic -> delta -> snapshot -> mart
        lineage = check_lineage(ws, datamart, signal_topic, backup_topic, {**stream_lineage(config), **users})
        keys, materialized = check_partitions(ws, datamart, expected_partitions)
        checks = check_asset_checks(ws)
        table, columns = check_lake_table(ws, [datamart, "signal_events"])
        dm_table, dm_columns = check_lake_table(ws, [datamart, "tables", datamart_table])
        dismiss_community_dialog(ws)
        base = ws.base_url
        group_assets = ["signal_events", "changelog", "increment", "snapshot", "history",
                        *(k.split("/", 1)[1] for k in users if k.startswith(f"{datamart}/"))]
        last = (expected_partitions or keys)[-1]
        pages = [
            Page("lineage", f"{base}/asset-groups", str(out / "lineage.png"), str(out / "lineage.html"),
                 must_show=["Global asset lineage", "kafka", datamart]),
            Page("asset-group", f"{base}/locations/{urllib.parse.quote(location)}/asset-groups/{urllib.parse.quote(datamart)}",
                 str(out / f"asset-group-{datamart}.png"), str(out / f"asset-group-{datamart}.html"),
                 must_show=[*group_assets, signal_topic, backup_topic, f"{len(keys)} partitions"]),
            Page("partitions",
                 f"{base}/assets/{urllib.parse.quote(datamart)}/snapshot?" + urllib.parse.urlencode(
                     {"view": "partitions", "partition": last}),
                 str(out / f"{datamart}-snapshot-partitions.png"), str(out / f"{datamart}-snapshot-partitions.html"),
                 must_show=[*(expected_partitions or keys), f"Materialized ({len(materialized[f'{datamart}/snapshot'])})"]),
        ]
        pages += mart_lineage_pages(base, datamart, users, backup_topic, out)
        pages += lake_table_pages(base, datamart, table, columns, out)
        pages += datamart_table_pages(base, datamart, dm_table.rsplit(".", 1)[1], dm_columns, out)
        for page in pages:
            check_page(chromium, page)
    finally:
        ws.stop()
    result = UICheckResult(base_url=ws.base_url, location=location, datamart=datamart, lineage=lineage,
                           partition_keys=keys, materialized_partitions=materialized, check_statuses=checks,
                           lake_table={table: columns}, datamart_table={dm_table: dm_columns},
                           pages=pages,
                           out_dir=str(out), seconds=time.monotonic() - started)
    (out / "ui_check.json").write_text(json.dumps(asdict(result), indent=2) + "\n", encoding="utf-8")
    return result


def main(argv: list[str] | None = None) -> int:
    demo = Path(os.environ.get("DELTAPORT_STATE_DIR", ".deltaport")) / "demo"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--demo-dir", type=Path, default=None,
                   help=f"a `deltaport demo` folder: defaults for the three below (default {demo})")
    p.add_argument("--dagster-home", default=None, help="default: $DAGSTER_HOME, else <demo-dir>/dagster")
    p.add_argument("--workspace", default=None, help="default: $DELTAPORT_WORKSPACE, else <demo-dir>/workspace.yaml")
    p.add_argument("--config", default=None, help="default: $DELTAPORT_CONFIG, else <demo-dir>/deltaport.yaml")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="folder for the screenshots (default %(default)s)")
    p.add_argument("--datamart", default="marketing")
    p.add_argument("--expect-partitions", default=None, help="comma-separated partition keys that must be materialized")
    p.add_argument("--port", type=int, default=None, help="webserver port (default: a free one)")
    p.add_argument("--timeout", type=float, default=180, help="seconds for the webserver to come up")
    a = p.parse_args(argv)
    if a.demo_dir:  # an explicit demo folder wins over the environment
        dagster_home = a.dagster_home or a.demo_dir / "dagster"
        workspace = a.workspace or a.demo_dir / "workspace.yaml"
        config = a.config or a.demo_dir / "deltaport.yaml"
    else:
        dagster_home = a.dagster_home or os.environ.get("DAGSTER_HOME") or demo / "dagster"
        workspace = a.workspace or os.environ.get("DELTAPORT_WORKSPACE") or demo / "workspace.yaml"
        config = a.config or os.environ.get("DELTAPORT_CONFIG") or demo / "deltaport.yaml"
    expected = [k.strip() for k in a.expect_partitions.split(",") if k.strip()] if a.expect_partitions else None
    try:
        result = run_ui_check(dagster_home=dagster_home, workspace=workspace, config=config, out_dir=a.out,
                              datamart=a.datamart, expected_partitions=expected, port=a.port, startup_timeout=a.timeout)
    except UICheckError as exc:
        print(f"UI check FAILED: {exc}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
