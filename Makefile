# RL Studio: the two commands of the README.
#   make run    set up (virtualenv, requirements, the project) and run the whole platform
#   make test   set up, lint (ruff), then run every test in three shards: cluster, then services and
#               plain at once (tests/shards.py; CI runs exactly this through .ci/run)
PYTHON ?= python3
VENV   ?= .venv
VPY    := $(VENV)/bin/python

.PHONY: install run test check-deploy

$(VENV)/.installed: requirements.txt pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --upgrade --quiet pip
	$(VPY) -m pip install --quiet -r requirements.txt
	@# setuptools warns that a folder named like a package may shadow it: the packages are under platform/ and trainer/ by design
	PYTHONWARNINGS="ignore:Editable installation" $(VPY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

install: $(VENV)/.installed

run: install
	$(VPY) -m rlstudio.launcher

test: install
	$(VENV)/bin/ruff check .
	$(VPY) tests/shards.py

check-deploy: install
	DJANGO_SETTINGS_MODULE=rlstudio.config.settings.production $(VPY) manage.py check --deploy --fail-level WARNING
