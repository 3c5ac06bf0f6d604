# The two set-up commands (see README):
#   make survey   installs everything needed, then runs the survey and writes the HTML report
#   make test     installs everything needed, then runs the tests
# Both are idempotent: what is already installed is reused.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SURVEY ?= reports/survey

.PHONY: survey test setup system tool envs

survey: setup
	$(BIN)/dltrace survey -o $(SURVEY)

test: setup
	$(BIN)/python -m pytest

setup: system tool envs

# System packages: Graphviz (dot) draws the call graphs; Chromium checks the reports.
system:
	@if ! command -v dot >/dev/null || ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing graphviz, chromium, chromium-driver"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq graphviz chromium chromium-driver >/dev/null; \
	fi

tool: $(BIN)/dltrace

$(BIN)/dltrace: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

# One virtual environment per framework, cached under $${DLTRACE_HOME:-~/.cache/dltrace}.
envs: tool
	$(BIN)/dltrace env setup
