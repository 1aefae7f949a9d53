# Two commands on a fresh machine:  make atlas  (the main job)  and  make test  (the tests).
# Both create .venv and install the project into it first.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch that this workplace's machines keep on disk; any torch >= 2.4 works.
TORCH ?= torch==2.13.0

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[evidence,test]"
	touch $@

.PHONY: install atlas test report clean
install: $(VENV)/.installed

atlas: $(VENV)/.installed
	$(VENV)/bin/snakemake --cores 1 atlas

test: $(VENV)/.installed
	$(PY) -m pytest

report: $(VENV)/.installed
	$(VENV)/bin/snakemake --cores 1 atlas report_assets
	$(VENV)/bin/snakemake --report reports/atlas.html

clean:
	rm -rf results/*/ .snakemake
