"""How due deltas become runs: ranges of consecutive deltas, capped, named by their whole span,
run in one process each."""

from __future__ import annotations

import json
import re

import dagster as dg
import pytest
from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin

from platform_assets.config import parse_config
from platform_assets.definitions import build_definitions
from platform_assets.deltas.partitions import delta_partitions
from platform_assets.deltas.requests import (RANGE_END_TAG, RANGE_START_TAG, delta_runs, range_request, ranges,
                                             request_deltas, source_tags)
from platform_assets.sync import bad_input
from resources.errors import DeltaportError, MissingKeyColumnError
from resources.spark.iceberg import KeyViolationError, _ranges_text
from resources.spark.kafka_reader import KafkaReadError


@pytest.mark.parametrize("due, cap, want", [
    ([], 5, []),
    ([7], 5, [(7, 7)]),
    (list(range(0, 12)), 5, [(0, 4), (5, 9), (10, 11)]),
    (list(range(3, 8)), 1, [(n, n) for n in range(3, 8)]),
    ([1, 2, 3, 7, 8], 10, [(1, 3), (7, 8)]),  # a gap is never inside a range
])
def test_due_deltas_are_cut_into_capped_ranges_of_consecutive_deltas(due, cap, want):
    assert ranges(due, cap) == want


def test_a_single_delta_is_a_partition_run_and_several_a_range_run():
    one = range_request("sales", 4, 4)
    assert one.partition_key == "00000004" and one.run_key == "sales:4" and RANGE_START_TAG not in one.tags
    assert request_deltas(one) == [4]
    many = range_request("sales", 4, 9)
    assert many.partition_key is None and many.run_key == "sales:4-9"
    assert (many.tags[RANGE_START_TAG], many.tags[RANGE_END_TAG]) == ("00000004", "00000009")
    assert many.tags["deltaport/datamart"] == "sales"  # one run at a time per source still holds
    assert many.tags["deltaport/deltas"] == "4-9"  # what the runs list shows of the range
    assert request_deltas(many) == [4, 5, 6, 7, 8, 9]


def test_a_commit_names_its_deltas_compactly():
    assert _ranges_text([3]) == "3"
    assert _ranges_text([3, 4, 5, 9, 11, 12]) == "3-5,9,11-12"


def test_every_asset_backfills_in_ranges_of_the_configured_size():
    cfg = parse_config({"sources": [{"name": "dm", "signal_topic": "s", "backup_topic": "b"},
                                    {"name": "q", "format": "qlik", "topic": "t"}],
                        "sensor": {"max_deltas_per_run": 7}})
    defs = build_definitions(cfg)
    policies = {node.key.to_user_string(): node.backfill_policy
                for node in defs.resolve_asset_graph().asset_nodes if node.is_partitioned}
    assert set(policies) == {"dm/signal_events", "dm/changelog", "dm/increment", "dm/snapshot", "dm/history",
                             "q/changelog", "q/increment", "q/snapshot", "q/history"}
    assert all(p == dg.BackfillPolicy.multi_run(7) for p in policies.values()), policies


def test_a_delta_job_runs_its_steps_in_the_run_process():
    defs = build_definitions(parse_config({"sources": [{"name": "dm", "signal_topic": "s", "backup_topic": "b"},
                                                       {"name": "q", "format": "qlik", "topic": "t"}]}))
    assert {defs.resolve_job_def(f"{s}_delta_job").executor_def.name for s in ("dm", "q")} == {"in_process"}


def _sensor_answer(instance: dg.DagsterInstance, due: list[int], retry_after: float = 60.0) -> dg.SensorResult:
    parts = delta_partitions("sales")
    with dg.build_sensor_context(instance=instance) as ctx:
        return delta_runs(ctx, parts, "sales", due, "no new closed delta", {"next": due[-1] + 1 if due else 5}, 5,
                          retry_after_seconds=retry_after)


def test_due_deltas_wait_while_a_run_of_their_source_is_in_flight_then_go_in_ranges():
    with dg.instance_for_test() as instance:
        busy = instance.add_run(dg.DagsterRun(job_name="sales_delta_job", run_id="a" * 36,
                                              status=dg.DagsterRunStatus.STARTED, tags=source_tags("sales")))
        instance.add_run(dg.DagsterRun(job_name="other_delta_job", run_id="b" * 36,
                                       status=dg.DagsterRunStatus.STARTING, tags=source_tags("other")))
        held = _sensor_answer(instance, [3, 4])
        assert held.run_requests == [] and json.loads(held.cursor) == {"next": 3}  # asked again next tick
        assert "deltas 3..4 wait for run aaaaaaaa (STARTED)" in held.skip_reason.skip_message
        assert [p.partition_keys for p in held.dynamic_partitions_requests] == [["00000003", "00000004"]]

        instance.handle_run_event(busy.run_id, dg.DagsterEvent(  # the run ends
            event_type_value="PIPELINE_SUCCESS", job_name="sales_delta_job", message="done"))
        assert instance.get_run_by_id(busy.run_id).status == dg.DagsterRunStatus.SUCCESS
        free = _sensor_answer(instance, [3, 4, 5, 6, 7, 8, 9])  # closed meanwhile: one range
        assert [r.run_key for r in free.run_requests] == ["sales:3-7", "sales:8-9"]
        assert json.loads(free.cursor) == {"next": 10}


def _daemon_run(instance: dg.DagsterInstance, run_id: str, tags: dict) -> dg.DagsterRun:
    """A started run of the source's job as the daemon launches it: with its job's origin, which
    Dagster's run retries need (`sync`'s in-process runs have none)."""
    origin = RemoteJobOrigin(RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("deltaport"), "__repository__"),
                             "sales_delta_job")
    return instance.add_run(dg.DagsterRun(job_name="sales_delta_job", run_id=run_id, status=dg.DagsterRunStatus.STARTED,
                                          tags=tags, remote_job_origin=origin))


def test_a_failed_run_awaiting_its_retry_holds_later_deltas_and_is_requested_again_if_the_retry_never_comes():
    """Dagster's retry consumer can miss a failure (it reads the event before the run's status and
    `will_retry` tag are stored; docs/operating.md): the run stays FAILURE, `will_retry: true`, no
    retry. Later deltas must not go first (their snapshot would refuse to skip the failed deltas)."""
    with dg.instance_for_test(overrides={"run_retries": {"enabled": True, "max_retries": 2}}) as instance:
        failed = _daemon_run(instance, "c" * 36, range_request("sales", 3, 4).tags)
        instance.report_run_failed(failed, message="the run worker is gone")  # Dagster tags it will_retry
        assert instance.get_run_by_id(failed.run_id).tags["dagster/will_retry"] == "true"

        held = _sensor_answer(instance, [5, 6], retry_after=3600)
        assert held.run_requests == [] and json.loads(held.cursor) == {"next": 5}
        assert re.search(r"run cccccccc failed \d+ s ago and Dagster will retry it", held.skip_reason.skip_message)

        again = _sensor_answer(instance, [5, 6], retry_after=0)  # no retry came in time
        (retry,) = again.run_requests
        assert retry.run_key == f"sales:3-4:retry-of-{failed.run_id}" and request_deltas(retry) == [3, 4]
        assert retry.tags["deltaport/retry_of"] == failed.run_id and retry.tags["deltaport/datamart"] == "sales"
        assert retry.tags["dagster/max_retries"] == "1"  # it is the failed run's first retry of 2
        assert retry.tags["dagster/priority"] == "-3" and json.loads(again.cursor) == {"next": 5}
        assert _sensor_answer(instance, [], retry_after=0).run_requests == [retry]  # nothing new due: still asked

        instance.add_run_tags(failed.run_id, {"dagster/auto_retry_run_id": "d" * 36})  # Dagster's retry came
        assert [r.run_key for r in _sensor_answer(instance, [5, 6], retry_after=0).run_requests] == ["sales:5-6"]


def test_status_says_what_holds_a_source_whose_failed_run_awaits_its_retry():
    from platform_assets.cli.status_cmd import _held_for_retry

    with dg.instance_for_test(overrides={"run_retries": {"enabled": True, "max_retries": 2}}) as instance:
        assert _held_for_retry(instance, "sales", 60) == ""
        failed = _daemon_run(instance, "f" * 36, range_request("sales", 3, 4).tags)
        instance.report_run_failed(failed, message="the run worker is gone")
        held = _held_for_retry(instance, "sales", 3600)
        assert re.search(r"HELD: run ffffffff failed \d+ s ago and awaits Dagster's retry \(the sensor requests its "
                         r"deltas again \d+ s from now if Dagster has not\)", held), held
        assert "requested again by the next tick" in _held_for_retry(instance, "sales", 0)
        instance.add_run_tags(failed.run_id, {"dagster/auto_retry_run_id": "d" * 36})
        assert _held_for_retry(instance, "sales", 0) == ""


@pytest.mark.parametrize("case", ["step failure", "sync run", "retries used up"])
def test_a_failed_run_dagster_will_not_retry_holds_nothing(case):
    with dg.instance_for_test(overrides={"run_retries": {"enabled": True, "max_retries": 2}}) as instance:
        tags = range_request("sales", 3, 3).tags
        if case == "sync run":  # in process: no job origin; `sync` lands its deltas again itself
            run = instance.add_run(dg.DagsterRun(job_name="sales_delta_job", run_id="e" * 36,
                                                 status=dg.DagsterRunStatus.STARTED, tags=tags))
        else:
            run = _daemon_run(instance, "e" * 36, {**tags, "dagster/max_retries": "0"} if case == "retries used up" else tags)
        instance.report_run_failed(run, message="failed")
        if case == "step failure":
            instance.add_run_tags(run.run_id, {"dagster/will_retry": "false"})
        answer = _sensor_answer(instance, [4], retry_after=0)
        assert [r.run_key for r in answer.run_requests] == ["sales:4"]


def test_the_sensor_asks_for_the_due_deltas_partitions_not_every_partition(monkeypatch):
    """A lake's partitions grow with its age (one per delta: 20,000 at 20,000 deltas); a tick
    asks whether each due delta has its partition, never lists them all."""
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(delta_partitions("sales").name, [f"{n:08d}" for n in range(5)])

        def every_partition(*_args, **_kwargs):
            raise AssertionError("a tick listed every partition of the source")

        monkeypatch.setattr(type(instance), "get_dynamic_partitions", every_partition)
        answer = _sensor_answer(instance, [4, 5])
        assert [p.partition_keys for p in answer.dynamic_partitions_requests] == [["00000005"]]


def _step_failure(make_error):
    """The step-failure event of a real (in-process) run whose one step raises `make_error()`."""
    @dg.op
    def step():
        raise make_error()

    @dg.job
    def one_step():
        step()

    run = one_step.execute_in_process(raise_on_error=False)
    return next(e for e in run.all_events if e.is_step_failure)


def _wrapped(cause):
    """As a delta step fails: deltaport's error under a dg.Failure naming the asset and deltas."""
    def make():
        try:
            raise cause
        except DeltaportError as exc:
            raise dg.Failure(description=f"sales/snapshot[0-4]: {exc}") from exc
    return make


def test_a_failed_range_is_cut_only_when_it_failed_on_bad_input():

    assert bad_input(_step_failure(_wrapped(KeyViolationError("lake.sales.t: delta 2 has NULL keys"))))
    assert bad_input(_step_failure(_wrapped(MissingKeyColumnError("writer schema lacks 'id'"))))
    # The same deltas would land once the broker or the engine is back: no cut.
    assert not bad_input(_step_failure(_wrapped(KafkaReadError("a Kafka read task failed"))))
    assert not bad_input(_step_failure(lambda: RuntimeError("the Spark Connect server went away")))
