"""The code location loads: what `dagster dev -w workspace.yaml` loads must validate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_workspace_code_location_validates(tmp_path):
    dagster = Path(sys.executable).with_name("dagster")
    res = subprocess.run([str(dagster), "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT,
                         capture_output=True, text=True, timeout=180, env={"PATH": str(dagster.parent), "HOME": str(tmp_path),
                                                                             "DAGSTER_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Validation successful for code location deltaport" in res.stderr + res.stdout
