# Every target runs tools from the project's own venv, so a fresh clone needs only python3 (3.11+),
# Java 17 or 21 (for Spark) and make: `make demo` and `make test` create and fill the venv on first use.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip
# Reinstall only when the declared dependencies change, not on every `make test`.
INSTALL_STAMP := $(VENV)/.acidtables-installed
# The S3-protocol test server (moto) gets a venv of its own; see its rule below.
S3_VENV ?= .venv-s3
S3_STAMP := $(S3_VENV)/.moto-installed
# Helm's own engine (helm-sdkpy) needs Python 3.12+: a venv of its own (see helm-venv)
HELM_VENV ?= .venv-helm
HELM_STAMP := $(HELM_VENV)/.helm-installed

.PHONY: install java test-env helm-venv test test-fast e2e e2e-local lint demo bench check image image-test

# what the library, the CLI and the demo need: python3 (3.11+) and the project's venv
install: $(INSTALL_STAMP)

# Spark (the demo, the tests) runs on Java 17 or 21: say which package brings one where none is found,
# and warn of any other release (the image stays on 17)
JAVA_PACKAGES := on Debian 13 or Ubuntu 24.04 and later: apt-get install default-jre-headless (Java 21); on Debian 12: apt-get install openjdk-17-jre-headless
java:
	@java_bin="$${JAVA_HOME:+$$JAVA_HOME/bin/}java"; \
	if ! version="$$($$java_bin -version 2>&1)"; then \
		echo "make: Spark needs Java 17 or 21 and '$$java_bin' does not run ($(JAVA_PACKAGES))" >&2; exit 1; \
	fi; \
	major="$$(printf '%s\n' "$$version" | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)"; \
	case "$$major" in \
		17|21) ;; \
		*) echo "make: warning: Java $${major:-of unknown version} found ($$java_bin); Spark here is tested on 17 and 21" \
			"($(JAVA_PACKAGES))" >&2 ;; \
	esac

# what the tests need besides: the S3 test server's venv and, where Python 3.12 can be had, Helm's
test-env: $(INSTALL_STAMP) $(S3_STAMP) helm-venv java

$(PYTHON):
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "make: acidtables needs Python 3.11 or newer as python3 (found $$(python3 --version 2>&1))" >&2; exit 1; }
	@python3 -m venv $(VENV) || { rm -rf $(VENV); echo "make: python3 cannot create a venv;" \
		"on Debian or Ubuntu install python3-venv (apt-get install python3-venv)" >&2; exit 1; }
	$(PIP) install -q --upgrade pip

# the duckdb extra by name: `make demo` ends with DuckDB querying a table the demo wrote (dev has it too)
$(INSTALL_STAMP): pyproject.toml | $(PYTHON)
	$(PIP) install -q -e '.[dev,duckdb]'
	touch $(INSTALL_STAMP)

# The S3-protocol test server (moto) in a venv of its own: moto pins python-dateutil below 3, the
# kubernetes client needs 3 or later, so they cannot share one.
$(S3_STAMP):
	python3 -m venv $(S3_VENV)
	$(S3_VENV)/bin/python -m pip install -q --upgrade pip
	$(S3_VENV)/bin/python -m pip install -q 'moto[server]>=5'
	touch $(S3_STAMP)

# Helm's engine (helm-sdkpy) needs Python 3.12+: a venv of its own from the first such Python found --
# python3 itself (Debian 13's and Ubuntu 24.04's are), python3.14, python3.13 or python3.12 on PATH, or
# pyenv's 3.12.1 -- said by name. Without one the chart tests skip and say how to get it; with
# ACIDTABLES_REQUIRE_HELM set (CI) pyenv installs 3.12.1 and the tests must run.
HELM_PYTHONS ?= python3 python3.14 python3.13 python3.12
helm-venv:
	@if [ -f $(HELM_STAMP) ]; then exit 0; fi; \
	python=""; \
	for candidate in $(HELM_PYTHONS); do \
		if $$candidate -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
			python="$$candidate"; break; \
		fi; \
	done; \
	if [ -z "$$python" ] && [ -n "$$ACIDTABLES_REQUIRE_HELM" ] && command -v pyenv >/dev/null 2>&1; then \
		pyenv install -s 3.12.1; \
	fi; \
	if [ -z "$$python" ] && PYENV_VERSION=3.12.1 python3.12 --version >/dev/null 2>&1; then \
		python="env PYENV_VERSION=3.12.1 python3.12"; \
	fi; \
	if [ -z "$$python" ]; then \
		if [ -n "$$ACIDTABLES_REQUIRE_HELM" ]; then \
			echo "make: ACIDTABLES_REQUIRE_HELM is set but no Python 3.12 or newer was found (tried $(HELM_PYTHONS), pyenv's 3.12.1)" >&2; \
			exit 1; \
		fi; \
		echo "make: no Python 3.12 or newer (tried $(HELM_PYTHONS), pyenv's 3.12.1), so no Helm engine venv" \
			"($(HELM_VENV)); the chart tests will skip (install one, e.g. 'pyenv install 3.12.1', and run make again)"; \
		exit 0; \
	fi; \
	set -e; \
	echo "make: Helm's engine venv ($(HELM_VENV)) from $$python: $$($$python -c 'import sys; print(sys.executable, sys.version.split()[0])')"; \
	$$python -m venv $(HELM_VENV); \
	$(HELM_VENV)/bin/python -m pip install -q --upgrade pip; \
	$(HELM_VENV)/bin/python -m pip install -q 'helm-sdkpy>=0.1.32'; \
	touch $(HELM_STAMP)

test: test-env
	$(PYTHON) -m pytest -m "not e2e and not image" -q

# the edit-test loop: everything but the long runs (CI runs `make test`, slow ones included)
test-fast: test-env
	$(PYTHON) -m pytest -m "not e2e and not slow and not image" -q

# the e2e tier against a real cluster: ACIDTABLES_E2E_KUBECONFIG and ACIDTABLES_E2E_IMAGE (docs/testing.md)
e2e: test-env
	$(PYTHON) -m pytest -m e2e tests/e2e

# the same tier against envtest dressed up as a cluster (test kubelet, controllers, a network namespace
# of its own: needs root and unshare); several minutes, so not part of CI
e2e-local: test-env
	$(PYTHON) -m tests.helpers.e2e_local

lint: install
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

demo: install java
	$(VENV)/bin/acidtables demo

# the randomized history checker's CI-sized run (issue 10): two histories under faults, exit 1 on an anomaly
check: install
	$(PYTHON) -m acidtables.check

# the acidtables image with Debian's tools (mmdebstrap, buildah; root), and the tests that run it with
# podman as the chart runs it (uid 185, read-only root, etcd on the host's loopback), and a driver with
# executors, each a container in a network namespace of its own (root: ip netns, a bridge)
IMAGE ?= localhost/acidtables:dev
image:
	spark-images/build-local.sh $(IMAGE)

image-test: install image
	ACIDTABLES_TEST_IMAGE=$(IMAGE) $(PYTHON) -m pytest -m image -q tests/test_image.py tests/test_image_executors.py

bench: install
	$(PYTHON) -m bench
