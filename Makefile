# deltaport: every target installs what it needs first (idempotent, quick when done already).
# Needs on the machine: Python 3.11, Java 17 and Maven (for the Kafka broker's jars).
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

# Apache Kafka's jars, resolved from Maven Central into ~/.cache/deltaport (outside git).
jars: install
	$(PY) -c "from resources.kafka.broker import ensure_kafka_jars; print('kafka jars in', ensure_kafka_jars())"

test: jars
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-unit: install
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

demo: jars
	$(VENV)/bin/deltaport demo

clean:
	rm -rf .deltaport .pytest_cache build *.egg-info
