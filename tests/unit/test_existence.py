"""resources/spark/existence.py: what is remembered (a "yes", per session), what is asked again
(a "no", a forgotten table), with a stand-in session whose catalog counts the questions."""

from __future__ import annotations

import uuid

from resources.spark import existence


class _Catalog:
    def __init__(self, tables=(), namespaces=()):
        self.tables, self.namespaces, self.asked = set(tables), set(namespaces), []

    def tableExists(self, ident):  # noqa: N802 - pyspark's name
        self.asked.append(ident)
        return ident in self.tables

    def databaseExists(self, name):  # noqa: N802
        self.asked.append(name)
        return name in self.namespaces


class _Session:
    def __init__(self, catalog):
        self.catalog, self.session_id = catalog, uuid.uuid4().hex


def test_a_yes_is_remembered_per_session_and_a_no_is_asked_again():
    catalog = _Catalog(tables={"lake.a.t"}, namespaces={"`lake`.`a`"})
    one, two = _Session(catalog), _Session(catalog)
    assert existence.table_exists(one, "lake.a.t") and existence.table_exists(one, "lake.a.t")
    assert not existence.table_exists(one, "lake.a.u") and not existence.table_exists(one, "lake.a.u")
    assert catalog.asked == ["lake.a.t", "lake.a.u", "lake.a.u"]
    assert existence.table_exists(two, "lake.a.t") and catalog.asked[-1] == "lake.a.t"  # its own session
    catalog.tables.add("lake.a.u")  # made meanwhile, by anyone: seen at the next question
    assert existence.table_exists(one, "lake.a.u")
    assert existence.namespace_exists(one, "lake", "a") and existence.namespace_exists(one, "lake", "a")
    assert not existence.namespace_exists(one, "lake", "b")
    assert catalog.asked[-2:] == ["`lake`.`a`", "`lake`.`b`"]


def test_a_forgotten_table_is_asked_about_again():
    catalog = _Catalog(tables={"lake.a.t"})
    session = _Session(catalog)
    assert existence.table_exists(session, "lake.a.t")
    catalog.tables.clear()  # dropped under the running process
    existence.forget(session, "lake.a.t")
    assert not existence.table_exists(session, "lake.a.t") and catalog.asked == ["lake.a.t", "lake.a.t"]


class _SqlSession(_Session):
    """Records its SQL; CREATE TABLE fails as Spark does when the namespace is gone (`gone`)."""

    def __init__(self):
        super().__init__(_Catalog())
        self.statements, self.gone = [], set()

    def sql(self, text):
        from pyspark.errors import AnalysisException

        self.statements.append(text)
        if text.startswith("CREATE NAMESPACE"):
            self.gone.discard(text.rsplit(" ", 1)[1])
        elif text.startswith("CREATE TABLE") and any(f" {ns}." in text for ns in self.gone):
            raise AnalysisException(message="[SCHEMA_NOT_FOUND] gone", errorClass="SCHEMA_NOT_FOUND")


def test_a_namespace_is_created_once_per_session_and_again_when_it_was_dropped():
    import pyarrow as pa

    from resources.spark.iceberg import ensure_table

    spark, schema = _SqlSession(), pa.schema([("id", pa.int64())])
    for table in ("t1", "t2", "t3"):  # the stand-in catalog has no table: each is created
        assert ensure_table(spark, f"lake.dm.{table}", schema).created
    made = [s for s in spark.statements if s.startswith("CREATE NAMESPACE")]
    assert len(made) == 1 and len([s for s in spark.statements if s.startswith("CREATE TABLE")]) == 3
    spark.gone.add("`lake`.`dm`")  # dropped under the process: the next create makes it again
    ensure_table(spark, "lake.dm.t4", schema)
    assert [s for s in spark.statements if s.startswith("CREATE NAMESPACE")] == made * 2
    assert spark.statements[-1].startswith("CREATE TABLE") and "`t4`" in spark.statements[-1]
