# Reasoning Flow Tracker — the two commands: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
STAMP := $(VENV)/.installed

.PHONY: run stop test lint fmt setup compile compile-optional db browser fuzz faults interop interop-accept wrk valgrind bench bench-instructions bench-matcher bench-flow-list bench-dashboard bench-export bench-drift bench-audit bench-scale load clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall whenever pyproject.toml (or the SDK's) changes. The SDK (sdk/, its own package) is
# installed too: its tests run against this server.
$(STAMP): pyproject.toml sdk/pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]' -e './sdk[otel]'
	touch $(STAMP)

setup: $(STAMP)

# The write path's hot modules compiled with mypyc (core/compiled.py says which, and how a build is
# loaded only while it matches the sources). Quick when nothing changed. `make run` goes on without
# it (the modules then run as Python); the tests and the benchmarks need it.
compile: setup
	$(BIN)/python scripts/compile.py

compile-optional: setup
	$(BIN)/python scripts/compile.py --optional

# Starts the embedded Postgres when DATABASE_URL is unset, then migrates and schedules; builds the
# dashboard's rollups a migration owed (reasoning.rollups; the job keeps them after).
db: setup
	$(BIN)/python manage.py migrate --no-input
	$(BIN)/python manage.py setup_schedules
	$(BIN)/python manage.py refresh_rollups

run: compile-optional db
	$(BIN)/python manage.py load_demo
	$(BIN)/python manage.py collectstatic --no-input --verbosity 0
	PORT=$(PORT) $(BIN)/python scripts/run.py

# Stops what `make run` started (also from another terminal), then the embedded Postgres.
stop:
	@if [ -x $(BIN)/python ]; then $(BIN)/python scripts/stop.py; else echo "nothing to stop (no $(VENV))"; fi

# The dependency audit (scripts/audit_dependencies.py): fails on a known vulnerability not in
# .pip-audit-ignore; when PyPI's advisories cannot be fetched it warns, or fails with PIP_AUDIT_STRICT=1.
PIP_AUDIT_STRICT ?=
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/python scripts/audit_dependencies.py $(if $(filter 1 true yes,$(PIP_AUDIT_STRICT)),--strict)

fmt: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The browser tests drive Debian's chromium through Playwright (executable_path; no
# browser download). Install it when missing: as root, or with sudo.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ ! -x "$(CHROMIUM)" ]; then \
		echo "Installing Debian's chromium for the browser tests"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi

# One worker per core (pytest-xdist; each worker gets its own test database).
test: lint compile db browser
	CHROMIUM=$(CHROMIUM) $(BIN)/pytest -n auto

# Fault injection, the long version of tests/test_faults.py (make test runs the short one): a
# bigger load on the three write routes and the SDK, each kill repeated three times, a 30 s
# refusal, PostgreSQL stopped and killed, stopped between a close and its receivers; then the slow
# clients and the span-ownership cases. One key=value line per figure, and a table per fault
# (sent, acknowledged, stored, lost, duplicated, 5xx, recovery); any loss or duplicate fails.
faults: compile db
	RFT_FAULTS_LONG=1 RFT_TEST_DB_NAME=test_rft_faults $(BIN)/pytest tests/test_faults.py tests/test_slow_clients.py \
		tests/reasoning/recording/test_otlp_span_ownership.py -p no:randomly -n 0 -s

# The longer schemathesis campaign (tests/test_fuzz.py; `make test` runs 10 examples per operation):
# 500 per operation plus the coverage phase (every documented boundary). Then bounded work per request
# (tests/test_bounded_work.py, timed): the largest request of each write route within 5 s, a worker's
# memory after them; one bounded.<case>.<figure>=<value> line per figure.
FUZZ_EXAMPLES ?= 500
fuzz: compile db
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_COVERAGE=1 FUZZ_RANDOM=1 $(BIN)/pytest tests/test_fuzz.py -p no:randomly -n 0
	RFT_BOUNDED_WORK=1 $(BIN)/pytest tests/test_bounded_work.py -p no:randomly -n 0 -s

# Re-capture what real instrumentation libraries send (scripts/interop/: each library at its current
# version in a throw-away virtualenv under /tmp/rft-interop, against a fake model server on loopback)
# into tests/fixtures/otlp/, then replay them (tests/reasoning/recording/test_otlp_interop.py): a library whose
# new version maps differently fails there, naming the field. INTEROP=<library> captures one.
# interop-accept records what is stored now as the expectations (read the diff before committing).
INTEROP ?=
interop: compile db
	$(BIN)/python scripts/interop/interop.py $(INTEROP)

interop-accept: db
	RFT_INTEROP_UPDATE=1 $(BIN)/pytest tests/reasoning/recording/test_otlp_interop.py -p no:randomly -q

# The write-path benchmark drives the API with Debian's wrk: install it when missing.
wrk:
	@if ! command -v wrk >/dev/null; then \
		echo "Installing Debian's wrk for the benchmark"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq wrk >/dev/null; \
	fi

# The instruction count of the write path runs it under Debian's valgrind: install it when missing.
valgrind:
	@if ! command -v valgrind >/dev/null; then \
		echo "Installing Debian's valgrind for the benchmark"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq valgrind >/dev/null; \
	fi

# The matcher bench samples the web workers with py-spy: a profiler, so it lives in a
# throw-away virtualenv outside the project, found through PATH.
BENCH_TOOLS ?= /tmp/rft-bench-tools
$(BENCH_TOOLS)/bin/py-spy:
	$(PYTHON) -m venv $(BENCH_TOOLS)
	$(BENCH_TOOLS)/bin/pip install --quiet --disable-pip-version-check py-spy

# The write path, OTLP ingest (10 and 1 flows a request), its instructions in the web process (the
# same two shapes; figures a VM's speed does not move), then the matcher (100k pathways; BENCH_LARGE=1
# for 1M), … Each figure is compared with bench/baseline.txt: one 15 % worse is printed as REGRESSION.
bench: compile db wrk valgrind $(BENCH_TOOLS)/bin/py-spy
	$(BIN)/python bench/bench_write_path.py
	$(BIN)/python bench/bench_ingest.py
	$(BIN)/python bench/bench_ingest.py --flows-per-request 1
	$(BIN)/python bench/bench_instructions.py
	$(BIN)/python bench/bench_instructions.py --flows-per-request 1
	PATH="$$PATH:$(BENCH_TOOLS)/bin" $(BIN)/python bench/bench_matcher.py
	$(BIN)/python bench/bench_flow_list.py
	$(BIN)/python bench/bench_dashboard.py
	$(BIN)/python bench/bench_export.py
	$(BIN)/python bench/bench_drift.py
	$(BIN)/python bench/bench_audit_log.py
	$(BIN)/python bench/bench_idle.py

# The OTLP write path's instructions a span in the web process, under valgrind (10 and 1 flows a request).
bench-instructions: compile db valgrind
	$(BIN)/python bench/bench_instructions.py
	$(BIN)/python bench/bench_instructions.py --flows-per-request 1

# The operators' flow list over 1,000,000 flows (server time in process).
bench-flow-list: db
	$(BIN)/python bench/bench_flow_list.py

# The operators' dashboard over 1,000,000 flows (and 200,000 model calls), from its rollups and from
# the flows (server time in process, Django's cache cleared).
bench-dashboard: db
	$(BIN)/python bench/bench_dashboard.py

# reasoning_export --format raw over 10,000 and 100,000 flows of 5 steps: rows/s and peak RSS.
bench-export: db
	$(BIN)/python bench/bench_export.py

# The daily drift job over 100 agents x 50 sessions x 20 decisions: agents judged per second.
bench-drift: db
	$(BIN)/python bench/bench_drift.py

# The verifiable audit log over 1,000,000 events: inclusion proofs over HTTP (p95, proofs/s) and
# tools/verify_audit_log.py against raw SHA-256 over the same leaves.
bench-audit: db
	$(BIN)/python bench/bench_audit_log.py

# Cost growth: one database grown to 1M, 3M and 10M steps (COPY, with their audit events) and 1M
# pathways; at each size the read routes, the writes, one day's export and audit_verify. Prints a
# table and draws docs/img/bench-scale.svg (about an hour on 2 cores).
bench-scale: compile db wrk
	$(BIN)/python bench/bench_scale.py

bench-matcher: compile db $(BENCH_TOOLS)/bin/py-spy
	PATH="$$PATH:$(BENCH_TOOLS)/bin" $(BIN)/python bench/bench_matcher.py

# A mixed load for LOAD_SECONDS (default 600) on loopback (bench/load.py, locust in the
# throw-away BENCH_TOOLS virtualenv): agent writes, operator pages, patient narratives; fails on
# any error, a write-route p99 over LOAD_WRITE_P99_MS (default 500), or a process whose memory grows.
LOAD_SECONDS ?= 600
$(BENCH_TOOLS)/bin/locust:
	$(PYTHON) -m venv $(BENCH_TOOLS)
	$(BENCH_TOOLS)/bin/pip install --quiet --disable-pip-version-check locust

load: compile db $(BENCH_TOOLS)/bin/locust
	LOAD_SECONDS=$(LOAD_SECONDS) LOCUST=$(BENCH_TOOLS)/bin/locust $(BIN)/python bench/load.py

clean:
	rm -rf $(VENV) .build staticfiles .pytest_cache .mypy_cache .ruff_cache
