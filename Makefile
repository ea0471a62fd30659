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

# Django's deployment checks on the production settings, with the deployment's own SECRET_KEY and
# ALLOWED_HOSTS from the environment (production refuses to load without them; docs/deploy.md).
check-deploy: install
	@test -n "$$SECRET_KEY" -a -n "$$ALLOWED_HOSTS" || { \
	  echo "make check-deploy checks the production settings as the deployment will run them: set SECRET_KEY" \
	       "(50+ random characters) and ALLOWED_HOSTS first, e.g." >&2; \
	  echo "  SECRET_KEY=\$$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')" \
	       "ALLOWED_HOSTS=studio.example.com make check-deploy" >&2; exit 2; }
	DJANGO_SETTINGS_MODULE=rlstudio.config.settings.production $(VPY) manage.py check --deploy --fail-level WARNING
