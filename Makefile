# deltaport: every target installs what it needs first (idempotent, quick when done already).
# Needs on the machine: Python 3.11, Java 17 and Maven (for the Kafka broker's and Iceberg's jars).
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: install jars test test-unit demo clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# Apache Kafka's and Iceberg's Spark jars, resolved from Maven Central into ~/.cache/deltaport
# (or $DELTAPORT_CACHE_DIR; outside git).
jars: install
	$(PY) -c "from resources.kafka.broker import ensure_kafka_jars; print('kafka jars in', ensure_kafka_jars())"
	$(PY) -c "from resources.spark.jars import ensure_iceberg_jars; print('iceberg jars in', ensure_iceberg_jars()[0].parent)"

test: jars
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-unit: install
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

demo: jars
	$(VENV)/bin/deltaport demo

clean:
	rm -rf .deltaport .pytest_cache build *.egg-info
