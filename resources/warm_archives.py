"""`make jars`' last step: the class archives of the embedded Spark server and Kafka broker
(resources/class_archive.py) made now, if this venv and machine have none, so that the first
servers of `make demo` and of `make test` map them instead of each making its own at its stop.

What flows through: a throwaway Spark server (deltaport's embedded settings, a catalog in a
temporary folder) does a little Iceberg work (a table created, written, merged, read) and is
stopped, which dumps and publishes its archive; the same for a broker started and stopped. A
failure here is printed and never fails `make jars`: a JVM without an archive only starts slower.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path


def warm() -> None:
    from resources.spark.engine import EngineSettings
    from resources.spark.server import server_class_archive
    from resources.spark.session import CatalogConfig, close_sessions, connect

    work = Path(tempfile.mkdtemp(prefix="deltaport-warm-"))
    try:
        settings = EngineSettings(state_dir=str(work / "spark"), catalog=CatalogConfig(
            name="lake", warehouse=str(work / "lake")), idle_timeout_minutes=0)
        server = settings.local_server()
        archive = server_class_archive(server.settings)
        if archive is not None and not archive.final.is_file():
            began = time.monotonic()
            spark = connect(server.ensure().url, settings.catalog)  # this server, whatever $SPARK_REMOTE says
            spark.sql("CREATE TABLE lake.warm.t (id bigint, v string) USING iceberg")
            spark.sql("INSERT INTO lake.warm.t VALUES (1, 'a'), (2, 'b')")
            spark.sql("MERGE INTO lake.warm.t t USING (SELECT 2L AS id, 'c' AS v) s ON t.id = s.id "
                      "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
            spark.sql("SELECT count(*) FROM lake.warm.t").collect()
            close_sessions(server.status().url)
            server.stop()
            print(f"Spark server class archive: {'made' if archive.final.is_file() else 'NOT made'} "
                  f"in {time.monotonic() - began:.0f} s ({archive.final})", flush=True)
        else:
            print(f"Spark server class archive: {archive.final if archive else 'off'}", flush=True)
    except Exception as exc:  # noqa: BLE001 - never fail the install for an optimisation
        print(f"Spark server class archive not made: {exc}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    try:
        from resources.maven import cache_root

        # The broker's jars are in the cache, not in a venv: its archives outlive a venv.
        if any((cache_root() / "class-archives").glob("kafka-broker-*.jsa")):
            print("Kafka broker class archives: there", flush=True)
            return
        from resources.kafka.broker import EmbeddedKafka

        kafka = EmbeddedKafka()
        kafka.start().stop()  # an orderly stop publishes the archive its start dumped
        made = kafka.class_archive is not None and kafka.class_archive.final.is_file()
        print(f"Kafka broker class archives: {'made' if made else 'NOT made'}", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"Kafka broker class archives not made: {exc}", flush=True)


if __name__ == "__main__":
    warm()
