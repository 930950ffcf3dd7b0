"""The instance files bound what Dagster keeps of the sensors' ticks (issue 43): with Dagster's
defaults a sensor's successful ticks, one or more per delta, are kept for ever."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("instance_file", ["dagster.yaml", "deploy/dagster-postgres.yaml"])
def test_every_finished_sensor_tick_is_purged_by_age(instance_file, tmp_path):
    settings = yaml.safe_load((ROOT / instance_file).read_text())
    settings.pop("storage", None)  # the settings are what is read here: local storage stands in
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(settings))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        days = instance.get_tick_retention_settings(InstigatorType.SENSOR)
    for status in (TickStatus.SUCCESS, TickStatus.SKIPPED, TickStatus.FAILURE):
        assert 0 < days[status] <= 30, f"{instance_file}: sensor ticks {status.value} kept {days[status]} days"
