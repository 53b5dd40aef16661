# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export INCREMENTAL_WAREHOUSE ?= $(CURDIR)/warehouse
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
SAMPLE_LAKE ?= $(CURDIR)/sample_lake/events
DEMO_START  ?= 2026-01-05
DEMO_DAYS   ?= 7
DEMO_EVENTS ?= 200000

.PHONY: help constraints setup check-prereqs postgres-server demo test test-long test-sequences test-clocks test-deployment stack-up stack-down soak ui validate bench bench-small clean

help:
	@echo "make setup   .venv with the tested versions (constraints.txt) and the cached Delta jars; the others run it"
	@echo "make demo    set up, generate a sample event lake, run the pipeline on it"
	@echo "make test    set up and run the test suite (all but the long tests)"
	@echo "make test-long  the long tests: many runs end to end, a real daemon, killed and racing processes"
	@echo "make test-sequences  drawn sequences of hostile operations vs the documented rules (SEQUENCE_EXAMPLES=200)"
	@echo "make test-clocks  the clock-dependent tests under two clocks (midnight and noon UTC)"
	@echo "make test-deployment  the production-like stack end to end (PostgreSQL, Spark cluster, daemon)"
	@echo "make stack-up / stack-down  start / stop that stack locally (state in .stack/)"
	@echo "make soak    many runs in a row over a growing source (SOAK_HOURS=24)"
	@echo "make ui      open the Dagster UI (dagster dev) on 127.0.0.1:3000"
	@echo "make validate  load the definitions as Dagster does (dagster definitions validate)"
	@echo "make constraints  resolve pyproject.toml's ranges anew in a scratch venv and rewrite constraints.txt"
	@echo "make postgres-server  install PostgreSQL's server from Debian's packages (as root; test-deployment needs it)"
	@echo "make clean   stop the local stack if it runs, then delete the demo's lake, warehouse, instance and .stack"
	@echo "make bench   benchmark: 10M events over 30 days, writes bench/RESULTS.md (about 3 hours; BENCH_ARGS=\"--rebuild-repeats 1 --skip-cold\": 77 min)"
	@echo "make bench-small  the same on 300k events over 10 days, once per Delta engine, side by side (bench/ENGINES-small.md)"

check-prereqs:
	@command -v $(PYTHON) >/dev/null 2>&1 && $(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
	  || { echo "error: Python 3.11 is required (looked for '$(PYTHON)'): install python3.11 or run 'make PYTHON=/path/to/python3.11 ...'"; exit 1; }
	@command -v java >/dev/null 2>&1 && java -version 2>&1 | awk -F'"' '/version/ {split($$2, v, "."); exit !(v[1] >= 17)}' \
	  || { echo "error: Java 17 or newer is required for Spark: install a JDK 17 (e.g. 'apt-get install openjdk-17-jdk-headless') and put 'java' on PATH"; exit 1; }
	@command -v mvn >/dev/null 2>&1 \
	  || { echo "error: Maven ('mvn') is required once, to fetch the Delta Lake jars into a local cache: install it (e.g. 'apt-get install maven')"; exit 1; }

$(STAMP): pyproject.toml constraints.txt | check-prereqs
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	$(BIN)/python -m resources.delta_jars
	@touch $(STAMP)

setup: check-prereqs $(STAMP)

demo: setup
	$(BIN)/python -m incremental_assets.demo --lake $(SAMPLE_LAKE) --start $(DEMO_START) --days $(DEMO_DAYS) --events $(DEMO_EVENTS)

# Test files run on TEST_WORKERS processes, each with its own Spark session (a file stays on
# one process: its module fixtures are built once). The long tests (marker `long`: many runs
# end to end, a real daemon, killed or racing child processes) are `make test-long`; CI runs both.
# Files go out in collection order (tests/differential first, the longest file): xdist's
# default puts files with few tests last, and the longest then ran alone at the end.
TEST_WORKERS ?= 2
PYTEST_SPREAD = $(BIN)/python -m pytest --ignore=tests/deployment -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: setup
	$(PYTEST_SPREAD) -m "not long"

test-long: setup
	$(PYTEST_SPREAD) -m long

# The long variant of the operation-sequence test with as many Hypothesis examples as asked
# (tests/differential/test_operation_sequences.py; `make test-long` runs 8).
SEQUENCE_EXAMPLES ?= 200
test-sequences: setup
	SEQUENCE_EXAMPLES=$(SEQUENCE_EXAMPLES) $(BIN)/python -m pytest tests/differential/test_operation_sequences.py -m long -p no:cacheprovider --hypothesis-show-statistics

# The production-like stack (deploy/): PostgreSQL from the OS packages, a Spark standalone
# master and two workers from the installed pyspark, dagster-webserver and dagster-daemon.
DEPLOY_STAMP := $(VENV)/.deploy-installed
$(DEPLOY_STAMP): $(STAMP)
	@command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 || $(MAKE) --no-print-directory postgres-server
	$(BIN)/pip install -q -c constraints.txt -e '.[test,deploy,stack]'
	@touch $(DEPLOY_STAMP)

# The PostgreSQL server binaries from Debian's packages, on a machine that lacks them (as root).
postgres-server:
	@command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] \
	  || { echo "error: PostgreSQL's server (initdb, pg_ctl) is required: install it (e.g. 'apt-get install postgresql') and put its bin directory on PATH"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	ln -sf $$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/initdb /usr/local/bin/initdb
	ln -sf $$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl /usr/local/bin/pg_ctl
	ln -sf $$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/postgres /usr/local/bin/postgres

test-deployment: $(DEPLOY_STAMP)
	$(BIN)/python -m pytest tests/deployment -p no:cacheprovider

STACK_DIR ?= $(CURDIR)/.stack
# Runs reach the cluster through a Spark Connect server (SPARK_CONNECT=0: each run is a driver of
# its own on the master).
# OBJECT_STORE=1: an S3-compatible object store too (bucket s3://lake) for the warehouse and source.
stack-up: $(DEPLOY_STAMP)
	$(BIN)/python -m deploy.stack up --dir $(STACK_DIR) $(if $(filter 0,$(SPARK_CONNECT)),--no-spark-connect) $(if $(OBJECT_STORE),--object-store)

stack-down:
	$(BIN)/python -m deploy.stack down --dir $(STACK_DIR)

# The tests whose clock is a parameter (a real Dagster daemon with an injected sensor clock),
# run at two times of day: just after midnight and at noon (UTC).
TEST_CLOCKS ?= 2026-01-07T00:05:00+00:00 2026-01-07T12:05:00+00:00
test-clocks: setup
	@for clock in $(TEST_CLOCKS); do \
	  echo "== tests under the clock $$clock"; \
	  TEST_CLOCK=$$clock $(BIN)/python -m pytest -m clock -p no:cacheprovider || exit 1; \
	done

# Many runs in a row over a growing source: in one process and as CLI processes (see
# tests/reliability/test_soak.py); SOAK_HOURS runs of each.
SOAK_HOURS ?= 24
soak: setup
	SOAK_HOURS=$(SOAK_HOURS) $(BIN)/python -m pytest tests/reliability/test_soak.py tests/reliability/test_clean_exit.py -p no:cacheprovider

# The benchmark's extra: DuckDB (the single-machine baseline it compares with; `make test`
# installs it too, to test that baseline), the Spark Connect client, and Dagster's PostgreSQL
# storage (with BENCH_ARGS="--dagster-storage postgres" the benchmark starts a PostgreSQL
# server from the OS's binaries for its instances).
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install -q -c constraints.txt -e '.[test,bench]'
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# Both Delta engines on the same data, then the two side by side (bench/ENGINES-small.md).
bench-small: $(BENCH_STAMP)
	$(BIN)/python -m bench --small --engine delta-rs $(BENCH_ARGS)
	$(BIN)/python -m bench --small --engine delta-spark $(BENCH_ARGS)
	$(BIN)/python -m bench.engines bench/RESULTS-small.json bench/RESULTS-small-delta-spark.json --out bench/ENGINES-small.md

validate: setup
	$(BIN)/dagster definitions validate

# The demo's instance with the demo's settings (its lake, its start and end dates, attributes as
# of its last day); any INCREMENTAL_* variable set in the environment wins.
DEMO_LAST_DAY = $(shell $(PYTHON) -c 'import datetime as d; print(d.date.fromisoformat("$(DEMO_START)") + d.timedelta(days=$(DEMO_DAYS) - 1))')
ui: setup
	@mkdir -p $(DAGSTER_HOME) && test -f $(DAGSTER_HOME)/dagster.yaml || $(BIN)/python -c 'import sys; from resources.sqlite_storage import local_instance_yaml; sys.stdout.write(local_instance_yaml(sys.argv[1]))' $(DAGSTER_HOME) > $(DAGSTER_HOME)/dagster.yaml
	INCREMENTAL_START_DATE=$${INCREMENTAL_START_DATE:-$(DEMO_START)} \
	INCREMENTAL_SOURCE_PATH=$${INCREMENTAL_SOURCE_PATH:-$(SAMPLE_LAKE)} \
	INCREMENTAL_ATTRIBUTES_AS_OF=$${INCREMENTAL_ATTRIBUTES_AS_OF:-$(DEMO_LAST_DAY)} \
	INCREMENTAL_END_DATE=$${INCREMENTAL_END_DATE:-$(DEMO_LAST_DAY)} \
	$(BIN)/dagster dev -h 127.0.0.1 -p 3000

# The local stack's processes (PostgreSQL, Spark, Dagster) are stopped before their state goes.
clean:
	@if [ -d $(STACK_DIR) ] && [ -x $(BIN)/python ]; then $(BIN)/python -m deploy.stack down --dir $(STACK_DIR) || true; fi
	rm -rf warehouse sample_lake .dagster_home spark-warehouse $(STACK_DIR)

# A new resolution of the ranges in pyproject.toml, written to constraints.txt (review its diff).
constraints: check-prereqs
	rm -rf .constraints-venv && $(PYTHON) -m venv .constraints-venv
	.constraints-venv/bin/pip install -q --upgrade pip
	.constraints-venv/bin/pip install -q -e '.[test,bench,deploy,stack]'
	{ sed -n '1,3p' constraints.txt; .constraints-venv/bin/pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .constraints-venv
