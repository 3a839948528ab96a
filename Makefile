# StoreTune: `make demo` and `make test` do all the set-up on a fresh Debian machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHARED ?= ../shared
DEMO_DB ?= results/demo.sqlite
# The largest of StoreTune's own datasets (datasets/README.md says how each was measured).
DEMO_DATASET ?= datasets/loop-storage-v3
# Debian packages of the device runner: fio, the mkfs tools, a C compiler with liburing for the trace replayer,
# and blktrace (blktrace and blkparse) for a traced run (runners/device/blktrace.py).
APT_DEVICES := fio e2fsprogs xfsprogs btrfs-progs gcc liburing-dev blktrace
# Debian packages the test suite needs: those, a real PostgreSQL for the PostgreSQL history path, and
# docker-compose to validate docker-compose.yml (no container engine runs here), and Debian's Chromium and
# its driver for the web report's browser test (a test tool's own browser download fails here).
APT_TEST := postgresql docker-compose chromium chromium-driver $(APT_DEVICES)

.PHONY: setup setup-devices demo serve docs test test-fast test-deploy apt clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
	  || { echo "StoreTune needs Python >= 3.10; $(PYTHON) is $$($(PYTHON) --version 2>&1)"; exit 1; }
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || $(MAKE) --no-print-directory apt PKGS=python3-venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,test,docs]'
	@touch $@

setup-devices: setup
	@$(MAKE) --no-print-directory apt PKGS="$(APT_DEVICES)"

# Install the Debian packages in PKGS that are missing (as root; CI runs as root).
apt:
	@missing=$$(for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "installing $$missing needs root: sudo make $(MAKECMDGOALS)"; exit 1; fi; \
	  echo "apt-get install $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# Two workers (pytest-xdist); the tests that share the host (devices, Ray) run in one of them, in turn.
TEST_WORKERS ?= 2
test: setup
	@$(MAKE) --no-print-directory apt PKGS="$(APT_TEST)"
	@site=$$(mktemp -d); $(MKDOCS) build --strict --quiet --site-dir $$site 2>&1 | grep -v "^INFO"; \
	  rc=$${PIPESTATUS[0]}; rm -rf $$site; [ $$rc = 0 ] || { echo "the docs site does not build (make docs)"; exit 1; }
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

# The container deployment started for real: Debian's Docker engine (started here if none runs, and stopped
# after), local base images (no registry is needed), then docker-compose.yml end to end (tests/test_deploy_e2e.py).
APT_DEPLOY := docker.io docker-compose debootstrap
test-deploy: setup
	@$(MAKE) --no-print-directory apt PKGS="$(APT_DEPLOY)"
	STORETUNE_TEST_DEPLOY=1 deploy/with-dockerd.sh $(BIN)/pytest -p no:cacheprovider -s -q tests/test_deploy_e2e.py \
	  -k end_to_end --timeout 3600

# The documentation site, built offline into site/ (open site/index.html); the references are generated from
# the code at each build (docs/gen_ref.py).
MKDOCS := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs
docs: setup
	$(MKDOCS) build --strict --site-dir site
	@echo "the site is in site/: open site/index.html"

test-fast: setup
	$(BIN)/pytest -m "not slow and not postgres and not device"

# The embedded default: the project's own measured dataset once there is one, else a public table.
DEMO_WORKLOAD ?= fileserver
demo: setup
	@dataset=$(DEMO_DATASET); \
	if [ -f "$$dataset/measurements.csv" ]; then \
	  data="--dataset $$dataset --context workload=$(DEMO_WORKLOAD)"; budget=80; \
	  echo "Replaying StoreTune's own dataset $$dataset (measured on loop devices; workload $(DEMO_WORKLOAD))."; \
	else \
	  dataset=$(SHARED)/datasets/moot_configs/BDBC.csv; \
	  if [ ! -f "$$dataset" ]; then \
	    echo "make demo needs a dataset: no $(DEMO_DATASET)/measurements.csv, and no $$dataset (clone the shared data beside this repository)"; \
	    exit 1; \
	  fi; \
	  data="--dataset $$dataset"; budget=100; \
	  echo "StoreTune has no dataset of its own yet: replaying $$dataset (Berkeley DB C, 2,560 measured configurations)."; \
	fi; \
	mkdir -p $$(dirname $(DEMO_DB)) results; \
	$(BIN)/storetune tune --runner dataset $$data --budget $$budget --algorithm auto --seed 1 \
	  --db sqlite:///$(DEMO_DB) --json > results/demo-summary.json || exit 1; \
	id=$$(tail -n1 results/demo-summary.json | $(BIN)/python -c 'import json,sys; print(json.load(sys.stdin)["campaign"])'); \
	$(BIN)/storetune best $$id --db sqlite:///$(DEMO_DB); \
	$(BIN)/storetune report $$id --out results/demo-campaign.html --db sqlite:///$(DEMO_DB) || exit 1; \
	echo "A small offline comparison (random, sa, ga, bo, auto; 10 seeds x 30 evaluations) for its report:"; \
	cmp=$$($(BIN)/storetune compare $$data --algorithms random,sa,ga,bo,auto --seeds 10 --budget 30 --json \
	  --db sqlite:///$(DEMO_DB) 2>/dev/null | tail -n1 | $(BIN)/python -c 'import json,sys; print(json.load(sys.stdin)["comparison"])') || exit 1; \
	$(BIN)/storetune report --comparison $$cmp --out results/demo-comparison.html --db sqlite:///$(DEMO_DB) || exit 1; \
	echo; \
	echo "Results: the history is $(DEMO_DB) (SQLite), the summary results/demo-summary.json."; \
	echo "  every trial:  $(BIN)/storetune trials $$id --db sqlite:///$(DEMO_DB)"; \
	echo "  campaigns:    $(BIN)/storetune campaigns --db sqlite:///$(DEMO_DB)"; \
	echo "  reports:      results/demo-campaign.html, results/demo-comparison.html (open them in a browser; no network needed)"

# The REST service on the embedded defaults: a SQLite history in results/, local worker processes.
SERVE_DB ?= results/service.sqlite
PORT ?= 8000
serve: setup
	@mkdir -p $$(dirname $(SERVE_DB))
	$(BIN)/storetune serve --port $(PORT) --db $${STORETUNE_DATABASE_URL:-sqlite:///$(SERVE_DB)}

clean:
	rm -rf $(VENV) results site .pytest_cache *.egg-info
