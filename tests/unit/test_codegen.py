"""When a session turns generated code on (resources/spark/codegen.py): the threshold it reads."""

from __future__ import annotations

from resources.spark.codegen import FROM_ROWS_KEY, generate_code_for, threshold


class Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)

    def set(self, key, value):
        self[key] = value


class Session:
    def __init__(self, session_id: str, **conf):
        self.session_id = session_id
        self.conf = Conf(conf)


def test_the_threshold_is_the_servers_setting_while_generated_code_is_off():
    off = {"spark.sql.codegen.wholeStage": "false"}
    assert threshold(Conf({FROM_ROWS_KEY: "1000000", **off})) == 1_000_000
    assert threshold(Conf(off)) is None  # a server that does not carry it: never
    assert threshold(Conf({FROM_ROWS_KEY: "0", **off})) is None
    assert threshold(Conf({FROM_ROWS_KEY: "lots", **off})) is None
    assert threshold(Conf({FROM_ROWS_KEY: "10"})) is None  # Spark's default: on already


def test_a_session_switches_once_at_the_threshold_and_stays_on():
    s = Session("codegen-unit-1", **{FROM_ROWS_KEY: "100", "spark.sql.codegen.wholeStage": "false"})
    assert not generate_code_for(s, 99)
    assert not generate_code_for(s, None)
    assert s.conf["spark.sql.codegen.wholeStage"] == "false"
    assert generate_code_for(s, 100)
    assert s.conf["spark.sql.codegen.wholeStage"] == "true"
    assert s.conf["spark.sql.codegen.factoryMode"] == "FALLBACK"
    assert not generate_code_for(s, 10**18)  # on already: nothing more to do
