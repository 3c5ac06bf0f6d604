# The two set-up commands (see README):
#   make survey   installs everything needed, then runs the survey and writes the HTML report
#   make test     installs everything needed, then runs the tests
# For development, `make test-fast` runs the tier that needs no framework environment.
# Both are idempotent: what is already installed is reused.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SURVEY ?= reports/survey

.PHONY: survey test test-fast lint setup system tool envs

survey: setup
	$(BIN)/dltrace survey -o $(SURVEY)

# Two pytest-xdist workers (at most four on a bigger machine), each test file on one
# worker (its session fixtures run once); the shared survey is built once per run
# (tests/conftest.py once_per_run). Probes wait on subprocesses and QEMU runs one
# thread: two workers keep both cores busy where one left one idle.
test: setup lint
	$(BIN)/python -m pytest -n logical --maxprocesses 4 --dist loadfile --durations 25

# Style and types, checked before the tests (pyproject.toml holds their settings).
lint: tool
	$(BIN)/ruff check .
	$(BIN)/mypy

# Synthetic traces, the format, the registry, the diff, the renderers and the command
# line's error paths: no framework environment, no emulated root, no slow fake survey.
test-fast: tool
	$(BIN)/python -m pytest -m "not frameworks and not slow" -n auto --dist loadgroup

setup: system tool envs

# System packages, each installed only when its command (or, for a path, its file) is
# missing (command:package): Graphviz (dot) draws the call graphs; Chromium and its
# driver check the reports; QEMU user mode, proot, debootstrap and Debian's archive
# keyring build and run the emulated aarch64 environments (the ARM audit), and Debian's
# aarch64 cross compiler builds the Python collector's C core for them (tracer/emulation/core.py);
# g++ parses the backend skeletons dltrace scaffold writes (their test).
SYSTEM_PACKAGES := dot:graphviz chromium:chromium chromedriver:chromium-driver \
	qemu-aarch64-static:qemu-user-static proot:proot /usr/sbin/debootstrap:debootstrap \
	/usr/share/keyrings/debian-archive-keyring.gpg:debian-archive-keyring g++:g++ \
	aarch64-linux-gnu-gcc:gcc-aarch64-linux-gnu
LOGS = $${DLTRACE_HOME:-$$HOME/.cache/dltrace}/logs

# One package at a time, so that a failure names the package, with apt's own reason
# (its E: lines) and the full log.
system:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do \
		what="$${pair%%:*}"; \
		case "$$what" in /*) [ -e "$$what" ] ;; *) command -v "$$what" >/dev/null 2>&1 ;; esac \
			|| missing="$$missing $${pair#*:}"; done; \
	[ -n "$$missing" ] || exit 0; \
	logs="$(LOGS)"; mkdir -p "$$logs"; \
	SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	echo "installing system packages:$$missing"; \
	$$SUDO apt-get update -qq >"$$logs/apt-update.log" 2>&1 || echo "warning: apt-get update failed (see $$logs/apt-update.log)" >&2; \
	for pkg in $$missing; do \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq "$$pkg" >"$$logs/apt-$$pkg.log" 2>&1 || { \
			why=$$(grep -E '^(E|Err):' "$$logs/apt-$$pkg.log" | head -3 | tr '\n' ' '); \
			echo "dltrace: error: system package $$pkg could not be installed: $${why:-apt-get exited with an error} (full log: $$logs/apt-$$pkg.log)" >&2; \
			exit 1; }; \
	done

tool: $(BIN)/dltrace

$(BIN)/dltrace: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

# One virtual environment per framework, cached under $${DLTRACE_HOME:-~/.cache/dltrace}.
envs: tool
	$(BIN)/dltrace env setup
