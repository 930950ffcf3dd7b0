"""The Dagster UI shows deltaport's lineage and partitions: seen in headless Chromium.

Takes the session's `deltaport demo --once --deltas 2` (the `demo_once` fixture,
tests/support/demo_once.py: its own embedded Kafka broker, Spark, Iceberg, in a temporary state
folder; test_clean_logs reads the same run), then `ui_check.run_ui_check` on the instance it
leaves: dagster-webserver on a free port, lineage and partitions through its GraphQL API, and screenshots (+ rendered DOM)
of the global lineage, the marketing asset graph, marketing/snapshot's partitions, the lineage
of the demo's own mart marketing/sales_by_store (topic -> changelog, increment -> snapshot -> mart),
the signal events' Columns pane and the catalog searched for their Iceberg table's name, the
Columns pane of the datamart table `sales` (its own asset) and the catalog searched for `sales`, which
must not be blank and must name the assets, partition keys and columns. The screenshots stay in
bench-results/ui/ (gitignored; or $DELTAPORT_UI_OUT) to be looked at.

Needs Debian's chromium (`apt-get install -y chromium`; the Makefile installs it): without it this
test FAILS, saying how to install it, rather than skipping.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ui_check  # noqa: E402

from platform_assets.deltas.partitions import partition_key  # noqa: E402
from platform_assets.prostore.signal_rows import COLUMNS as SIGNAL_COLUMNS  # noqa: E402
from tests.support.demo_once import DemoOnce  # noqa: E402

DATAMART = "marketing"


@pytest.mark.integration
@pytest.mark.ui
@pytest.mark.timeout(1500)
def test_ui_shows_lineage_and_partitions(request: pytest.FixtureRequest) -> None:
    missing = None
    try:  # first: no point landing deltas for four minutes when the browser is missing
        ui_check.find_chromium()
    except ui_check.ChromiumNotFound as exc:
        missing = str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)

    once: DemoOnce = request.getfixturevalue("demo_once")  # the session's `demo --once --deltas 2`
    demo, log, deltas = once.folder, once.text(), once.deltas
    # A clean run prints no ERROR line (issue 31: "does it exist yet" asked by failing queries printed
    # 62, each logged at ERROR by pyspark's Connect client): what a team's log alerting would fire on.
    errors = once.error_lines()
    assert errors == [], f"{len(errors)} ERROR lines in the demo's output, e.g. {errors[:3]}"
    keys = [partition_key(n) for n in range(deltas)]
    out = Path(os.environ.get("DELTAPORT_UI_OUT", ui_check.DEFAULT_OUT))
    try:
        result = ui_check.run_ui_check(dagster_home=demo / "dagster", workspace=demo / "workspace.yaml",
                                       config=demo / "deltaport.yaml", out_dir=out, datamart=DATAMART,
                                       expected_partitions=keys)
    except ui_check.UICheckError as exc:
        result, failure = None, f"{exc}\n(screenshots, DOM dumps and webserver.log in {out})"
    if result is None:
        pytest.fail(failure, pytrace=False)
    print(result.summary())

    # run_ui_check asserted all of this already; restated here as the test's contract.
    lineage = {asset: set(deps) for asset, deps in result.lineage.items()}
    assert {"marketing/changelog", "marketing/increment"} <= lineage["marketing/snapshot"]
    assert {"marketing/changelog", "kafka/prostore.backup"} <= lineage["marketing/increment"]
    assert "kafka/prostore.backup" in lineage["marketing/changelog"]
    assert "kafka/prostore.signal" in lineage["marketing/signal_events"]
    # sourcedb is backup-only: the same assets from the backup topic alone, no signal_events.
    assert {"sourcedb/changelog", "kafka/prostore.backup"} <= lineage["sourcedb/increment"]
    assert "sourcedb/signal_events" not in lineage
    assert re.search(r"^sourcedb\s+\d+\s+\w+\s+\d+\s+\d+\s+yes$", log, re.M)
    # ... and beside it one change-stream source of each format, with the same shape.
    for source, topic in (("sales_qlik", "qlik.sales"), ("shop_dataworks", "dataworks.shop"),
                          ("shop_datastream", "datastream.shop")):
        assert {f"{source}/changelog", f"{source}/increment"} <= lineage[f"{source}/snapshot"], source
        assert {f"{source}/changelog", f"kafka/{topic}"} <= lineage[f"{source}/increment"], source
    assert "all equal to the truth" in log
    assert result.partition_keys == keys
    for asset in ("signal_events", "changelog", "increment", "snapshot", "history"):
        assert sorted(result.materialized_partitions[f"{DATAMART}/{asset}"]) == keys, asset
    assert "marketing/snapshot" in lineage["marketing/sales_by_store"]
    # A healthy demo shows no red (issue 58): every evaluated check passed, lag_within_bound of every
    # source among them, though the emulated deltas are dated February 2024.
    assert result.check_statuses and set(result.check_statuses.values()) <= {"SUCCEEDED", "NOT_EVALUATED"}
    for source in ("marketing", "sourcedb", "sales_qlik", "shop_dataworks", "shop_datastream"):
        assert result.check_statuses[f"{source}/snapshot:lag_within_bound"] == "SUCCEEDED", result.check_statuses
    for source in ("marketing", "sourcedb"):  # the plain demo sends no malformed message (`--bad-input` does)
        assert result.check_statuses[f"{source}/increment:no_quarantined_messages"] == "SUCCEEDED"
    assert [p.name for p in result.pages] == ["lineage", "asset-group", "partitions", "mart-lineage", "columns",
                                              "table-search", "datamart-table-columns", "datamart-table-search"]
    # A lake table is a thing in the catalog: its columns in the Columns pane, found by its name.
    assert result.lake_table == {f"lake.{DATAMART}_meta.signal_events": [name for name, _ in SIGNAL_COLUMNS]}
    # ... and so is each of a datamart's tables: an asset of its own (platform_assets/lake_tables.py), which
    # typing its name in the catalog's search box finds, with its columns as the datamart's DDL declares them.
    assert result.datamart_table == {f"lake.{DATAMART}.sales": ["id", "transaction_date", "product_code",
                                                                "product_units", "store_id", "description"]}
    for page in result.pages:
        assert Path(page.screenshot).stat().st_size > 10_000, page
        assert page.colours >= 24 and page.non_background >= page.min_non_background, page
        dom = Path(page.dom).read_text(encoding="utf-8")
        assert all(text in dom for text in page.must_show), page

    # The same lake through `deltaport read`, run as a user would after the demo (no $SPARK_REMOTE;
    # the Spark server the demo used may be gone): as many rows as the demo counted against the
    # truth, one JSON object per line, timestamps in ISO 8601 with microseconds and Z, sorted by key.
    last = deltas - 1
    counted = re.search(rf"^{DATAMART}\s+{last}\s+sales\s+(\d+)\s+(\d+)\s+yes$", log, re.M)
    assert counted, "the demo printed no equal row count for sales"
    config = str(demo / "deltaport.yaml")
    cli = [sys.executable, "-m", "platform_assets.cli", "read", f"{DATAMART}.sales", "--as-of-delta", str(last),
           "--config", config]
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    try:
        res = subprocess.run(cli, capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        rows = [json.loads(line) for line in res.stdout.splitlines()]
        assert len(rows) == int(counted.group(1))
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", r["transaction_date"]) for r in rows)
        assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
        res = subprocess.run(cli + ["--format", "csv"], capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0 and res.stdout.splitlines()[0] == (
            "id,transaction_date,product_code,product_units,store_id,description")
        assert len(res.stdout.splitlines()) == len(rows) + 1
    finally:  # the embedded server `read` started in the demo's folder
        subprocess.run([sys.executable, "-m", "platform_assets.cli", "spark", "stop", "--config", config],
                       env=env, capture_output=True, timeout=120)
