# The two commands a newcomer needs: `make demo` (the main job, end to end) and `make test`.
# Both install what is missing first (Debian packages, the Python venv).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PERFCI_TEST_DATABASE_URL ?= postgresql+psycopg://perfci:perfci@127.0.0.1:5432/perfci_test
export PERFCI_TEST_REDIS_URL ?= redis://127.0.0.1:6379/15

# The tests and the demo start hundreds of Python processes that import this checkout: let them keep
# its bytecode (some CI images turn that off, and then every process compiles it again).
unexport PYTHONDONTWRITEBYTECODE

# pytest-xdist workers for `make test` (tests/support/groups.py keeps tests sharing a resource on one).
# Three on two cores: the third runs while the others wait on their servers, agents and the forge.
PYTEST_WORKERS ?= 3

.PHONY: setup services dataplane gitea demo measure lint test test-fast test-playbooks dashboards clean

setup:
	bash .ci/install-deps

services: setup
	bash .ci/services

gitea:
	bash .ci/gitea

dataplane: setup
	test -f dataplane/build/build.ninja || meson setup dataplane/build dataplane --buildtype=release
	ninja -C dataplane/build

# The main job: scratch history -> server -> agent -> alert -> bisect -> plots, on this machine
# (embedded SQLite, in-process tasks). Output under .perfci/demo/.
demo: setup
	$(VENV)/bin/perfci demo $(DEMO_ARGS)

# Build the dataplane at HEAD in a clean worktree and measure it (auto backend).
measure: setup
	$(VENV)/bin/perfci measure --repo . --commit HEAD $(MEASURE_ARGS)

# ruff over the whole tree ([tool.ruff] in pyproject.toml).
lint: setup
	$(VENV)/bin/ruff check .

# ruff, then pytest on $(PYTEST_WORKERS) workers. The forge tests (tests/forge/) drive a real Gitea
# built by .ci/gitea (once per version, cached). perfci_agent is applied to this host only with
# PERFCI_TEST_APPLY_PLAYBOOKS=1 (.ci/run sets it); without it those tests are skipped, saying so.
test: lint services dataplane gitea
	PERFCI_GITEA_BIN="$${PERFCI_GITEA_BIN:-$$(bash .ci/gitea)}" $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# Only what needs neither the services nor a dataplane build, and leaves this host alone.
test-fast: lint
	$(PY) -m pytest -m "not dataplane and not services and not playbooks" $(PYTEST_ARGS)

# The playbooks stage alone (part of `make test`): ansible-lint, syntax checks, and with
# PERFCI_TEST_APPLY_PLAYBOOKS=1 perfci_agent applied to this host twice (the second must change
# nothing) and the installed agent's self-check.
test-playbooks: setup
	$(PY) -m pytest -m playbooks tests/playbooks $(PYTEST_ARGS)

# Regenerate the Grafana dashboards (dashboards/json/) from their Python factories.
dashboards: setup
	$(PY) -m dashboards

clean:
	rm -rf dataplane/build .pytest_cache
