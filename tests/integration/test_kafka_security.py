"""Kafka over SASL_SSL (SCRAM-SHA-512) with ACLs, through `deltaport sync` as users run it
(bench/fault_security.py: the fault suite's security cases, at the same size).

On a secured embedded broker, with the password given only through the environment: the right
credentials land every delta equal to the truth; a wrong password fails the sync within seconds
naming the broker and the user; a topic the ACLs deny fails it naming the topic; and the password
(right or wrong) is in no output, no file of the case's Dagster instance, lake or state, nor in
the Spark server's or the broker's logs. The module's own probe finds a planted password, so an
empty finding means something.
"""

from __future__ import annotations

import pytest

from bench.fault_security import SECURITY, USER, _holding, run_security_cases

pytestmark = pytest.mark.integration


def test_the_password_search_finds_a_planted_password(tmp_path):
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "events.db").write_bytes(b"\x00\x01 sasl.password=s3cr3t-Value \x02")
    assert _holding("s3cr3t-Value", "", [tmp_path]) == [str(tmp_path / "deep" / "er" / "events.db")]
    assert _holding("s3cr3t-Value", "... s3cr3t-Value ...", []) == ["sync output"]


def test_sasl_ssl_with_acls_right_wrong_and_denied(spark_remote, spark_server_log, tmp_path):
    rows = {r.case: r for r in run_security_cases(spark_remote, tmp_path, seed=5, deltas=2,
                                                  extra_logs=(spark_server_log,) if spark_server_log else ())}
    assert sorted(rows) == sorted(SECURITY)
    landed = rows["sasl-scram-right-credentials"]
    assert landed.recovered and landed.deltas > 0, landed.problems
    assert (landed.rows_lost, landed.rows_duplicated, landed.deltas_applied_twice) == (0, 0, 0), landed
    assert landed.increment_rows_missing == landed.increment_rows_extra == 0, landed
    wrong, denied = rows["sasl-scram-wrong-password"], rows["acl-topic-denied"]
    assert f"refused the credentials of user {USER!r}" in wrong.failed_with, wrong.problems
    assert f"user {USER!r} may not read topic 'private.signal." in denied.failed_with, denied.problems
    for row in rows.values():
        assert row.secret_found_in == [] and not row.problems and row.survived, row
