# deltaport: every target installs what it needs first (idempotent, quick when done already).
# Needs on the machine: Python 3.11, Java 17 and Maven (for the Kafka broker's and Iceberg's jars), Go (the
# on-disk S3 server of the store-restart test).
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=
# `make test` runs two pytest workers (pytest-xdist), each with its own broker and PostgreSQL, both
# on one Spark server (tests/support/session_spark.py): many tests wait on daemons, polls and
# subprocesses rather than on the CPU, so two overlap well on 2 cores. A whole file goes to one
# worker (its module fixtures are shared).
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
BENCH_ARGS ?=

.PHONY: install jars chromium postgres test test-unit test-ui demo dev bench faults clean

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# Apache Kafka's and Iceberg's Spark jars (with the AWS bundle for S3FileIO), deltaport's local
# file system for the embedded Spark server (two classes, compiled by the JDK's javac), Iceberg's REST
# catalog server for the object-store tests (its launcher compiled by the JDK's javac), resolved
# from Maven Central into ~/.cache/deltaport (or $DELTAPORT_CACHE_DIR; outside git); and gofakes3,
# the on-disk S3 server of the store-restart test, built by `go install` into the same cache; then
# the class archives of the embedded Spark server and Kafka broker (resources/warm_archives.py: about
# 40 s once per venv, so that no server of `make demo` or `make test` makes its own at its stop).
jars: install
	$(PY) -c "from resources.kafka.broker import ensure_kafka_jars; print('kafka jars in', ensure_kafka_jars())"
	$(PY) -c "from resources.spark.jars import ensure_iceberg_jars; print('iceberg jars in', ensure_iceberg_jars()[0].parent)"
	$(PY) -c "from resources.spark.local_fs import local_fs_classes; print('local file system for Spark in', local_fs_classes())"
	$(PY) -c "from resources.demo_objstore.rest_jars import rest_catalog_classpath; print('iceberg REST catalog server in', rest_catalog_classpath()[1].parent)"
	$(PY) -c "from tests.support.disk_s3_server import gofakes3_binary; print('on-disk S3 test server at', gofakes3_binary())"
	$(PY) -m resources.warm_archives

# Debian's chromium, for the UI test (headless screenshots of the Dagster UI).
chromium:
	@command -v chromium >/dev/null 2>&1 || ($(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# Debian's PostgreSQL server binaries, for the tests' throwaway servers (the state store, the
# Dagster instance and the Iceberg JDBC catalog on PostgreSQL); none is left running.
# (Or DELTAPORT_TEST_POSTGRES_URL: an existing server the tests may create databases on.)
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ($(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql)

test: jars chromium postgres
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

test-unit: install
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

test-ui: jars chromium
	$(VENV)/bin/pytest -m ui $(PYTEST_ARGS)

demo: jars
	$(VENV)/bin/deltaport demo

# The UI and daemon on ./deltaport.yaml, with the instance in ./.dagster (dagster.yaml linked in).
dev: jars
	@mkdir -p .dagster && ln -sf ../dagster.yaml .dagster/dagster.yaml
	DAGSTER_HOME=$(CURDIR)/.dagster $(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# Speed as ratios to baselines run in the same process (never timed assertions): first the
# Avro decoders alone (a few seconds), then a start of the embedded Spark server with its class archive
# against one without (SERVER_START_BENCH_ARGS="--runs 5"), then the platform end to end (a few minutes on 2 cores;
# e.g. make bench BENCH_ARGS="--deltas 8 --rows 100000"), then the change streams (Qlik,
# DataWorks, Datastream; STREAM_BENCH_ARGS="--size 1000"), then a datamart through Dagster (sync
# -> run -> assets; seconds and Iceberg commits per delta; DAGSTER_BENCH_ARGS="--rows 20000"), then
# a steady delta of ours against a Dagster peer (the Spark+Iceberg script as a partitioned asset) and
# Dagster's floor (our asset graph doing nothing), all run the way `sync` runs ours, with the lake
# files each writes (DAGSTER_PEER_BENCH_ARGS="--deltas 12 --rows 20000"), then
# each change stream through Dagster the same way (DAGSTER_STREAM_BENCH_ARGS="--rows 20000"), then
# what table maintenance buys an aged table (MAINTENANCE_BENCH_ARGS="--deltas 500"), then a maintenance
# pass with nothing due on 12 and 48 tables against each table asked on its own
# (MAINTENANCE_PASS_BENCH_ARGS="--tables 200"), then what keeping
# history costs, a datamart's (HISTORY_BENCH_ARGS) and a Qlik stream's (STREAM_HISTORY_BENCH_ARGS="--format
# dataworks"): history on against off, same traffic, one warm server; then a steady delta of 10k
# changes on a table of 200k rows and of 20M (SIZE_BENCH_ARGS="--large 4000000"), a datamart's and a
# change stream's (SIZE_STREAM_BENCH_ARGS), and a datamart's delta of 100 changes of keys with locality
# (SIZE_LOCALITY_BENCH_ARGS); then a steady
# delta and `deltaport read` at age ~100 and on the same lake aged to 20,000 deltas by a generator
# (AGE_BENCH_ARGS="--age 5000"); then a warm `deltaport read` of a 100k-row table, current and as of
# an older delta, each format, split into start, imports and the read's phases (READ_BENCH_ARGS="--rows 20000");
# then `deltaport sql` of an aggregate (current and as of delta 0) and `deltaport read` of the same 100k-row
# table, JVM-free (DuckDB, PyIceberg) against Spark, process start included, the DuckDB aggregate also
# with both cores kept busy beside it, imports reported apart (SQL_BENCH_ARGS="--rows 20000");
# then a Dagster instance aged to 1k and 20k deltas, without and with the partition window
# (PARTITIONS_BENCH_ARGS="--sizes 1000,100000,300000 --window 10000"; "--postgres" for a PostgreSQL
# instance on a throwaway server), what a retirement pass's sweep of retired runs' files costs, caught up
# and on a backlog (RUN_FILES_BENCH_ARGS="--orphans 20000"), and the UI's own queries through dagster-webserver on instances of
# 1k, 100k and 300k deltas held to the default window (PARTITIONS_UI_BENCH_ARGS="--without-window --window 10000");
# then the same deltas on the local lake and on a REST catalog over
# an S3 store, with the S3 requests and the files per delta (OBJSTORE_BENCH_ARGS="--rows 2000");
# then the same 2-table change landed by `sync` in a datamart of 2 tables and of 100: a steady delta's seconds,
# files and commits, wide against narrow, and the first delta's (WIDTH_BENCH_ARGS="--wide 500 --deltas 4 --sql":
# the first delta of 500 tables takes minutes); the same for a Qlik stream of 2 tables and of 100 (`--format qlik`).
# Results: bench-results/*.json.
bench: jars
	$(PY) bench/avro_decode.py
	$(PY) bench/server_start_bench.py $(SERVER_START_BENCH_ARGS)
	$(PY) bench/platform_bench.py $(BENCH_ARGS)
	$(PY) bench/stream_bench.py $(STREAM_BENCH_ARGS)
	$(PY) bench/dagster_bench.py $(DAGSTER_BENCH_ARGS)
	$(PY) bench/dagster_peer_bench.py $(DAGSTER_PEER_BENCH_ARGS)
	$(PY) bench/dagster_stream_bench.py $(DAGSTER_STREAM_BENCH_ARGS)
	$(PY) bench/maintenance_bench.py $(MAINTENANCE_BENCH_ARGS)
	$(PY) bench/maintenance_pass_bench.py $(MAINTENANCE_PASS_BENCH_ARGS)
	$(PY) bench/history_bench.py $(HISTORY_BENCH_ARGS)
	$(PY) bench/stream_history_bench.py $(STREAM_HISTORY_BENCH_ARGS)
	$(PY) bench/size_bench.py $(SIZE_BENCH_ARGS)
	$(PY) bench/size_bench.py --shape locality --changes 100 --out bench-results/size_locality.json $(SIZE_LOCALITY_BENCH_ARGS)
	$(PY) bench/size_stream_bench.py $(SIZE_STREAM_BENCH_ARGS)
	$(PY) bench/age_bench.py $(AGE_BENCH_ARGS)
	$(PY) bench/read_bench.py $(READ_BENCH_ARGS)
	$(PY) bench/sql_bench.py $(SQL_BENCH_ARGS)
	$(PY) bench/partitions_bench.py $(PARTITIONS_BENCH_ARGS)
	$(PY) bench/run_files_bench.py $(RUN_FILES_BENCH_ARGS)
	$(PY) bench/partitions_ui_bench.py $(PARTITIONS_UI_BENCH_ARGS)
	$(PY) bench/objstore_bench.py $(OBJSTORE_BENCH_ARGS)
	$(PY) bench/width_bench.py --wide 100 $(WIDTH_BENCH_ARGS)
	$(PY) bench/width_bench.py --format qlik --wide 100 $(WIDTH_BENCH_ARGS)

# The fault suite at full size (issue 11; its quick cases are in `make test`): `sync` killed at six
# points of a range run, then recovered and compared with the truth; `sync` killed at three points of
# a retirement pass of the partition window (issue 43; none half-retired); the embedded Spark server
# killed, the broker restarted, under a tick or a run; bad input at scale, 1000
# seeded corruptions per wire format through the real broker and the sensor's own reading code.
# Report: a table and bench-results/faults.json (FAULTS_ARGS="--corruptions 5000", "--kills ''",
# "--retirement ''").
faults: jars postgres
	$(PY) bench/faults.py $(FAULTS_ARGS)

clean:
	rm -rf .deltaport .pytest_cache build *.egg-info
