# Two commands on a fresh machine:  make atlas  (the main job)  and  make test  (the tests).
# Both create .venv and install the project into it first. Snakemake lives in .venv: the targets
# below run it from there, so no activation is needed (or: . .venv/bin/activate).
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; any torch >= 2.4 works.
TORCH ?= torch==2.13.0
# One line per job (its own summary) and Snakemake's "N of M steps done"; QUIET= for every detail.
# Last on each command line: --quiet takes every word after it.
QUIET ?= --quiet rules host
SNAKEMAKE := $(VENV)/bin/snakemake
# `make replay RECORD=<name>`: a committed record, with the configuration records/INDEX.json names.
# Every Snakemake target below takes RECORD too (`make report RECORD=<name>` after that replay),
# so no later command has to be typed as a long `snakemake ...` line.
RECORD ?=
# The shell words that open each Snakemake recipe: with RECORD, the record's arguments in $$args
# (an unknown record stops the recipe, naming the records there are), else nothing.
WITH_RECORD = args="$$(if [ -n "$(RECORD)" ]; then PYTHONPATH=workflow $(PY) -m groupconv_atlas.study.records.committed replay-args $(RECORD); fi)" && \
	{ [ -z "$$args" ] || echo "snakemake ... $$args"; } &&

# Two distributions, both editable: the op (groupconv, workflow/groupconv) first, from its folder
# (it is on no index), then the study (groupconv-atlas, this folder), which depends on it.
$(VENV)/.installed: pyproject.toml workflow/groupconv/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e workflow/groupconv
	$(PY) -m pip install -q -e ".[evidence,test]"
	touch $@

.PHONY: install atlas test test-all test-integration test-records report verify mobilenet_probe nsight compare_records overhead_probe \
	network_probe unseen_probe epilogue_probe replay export_tables clean
install: $(VENV)/.installed

# The command is echoed whole (make's own echo would show the shell words that read RECORD).
atlas: $(VENV)/.installed
	@$(WITH_RECORD) echo "$(SNAKEMAKE) atlas $$args $(QUIET)" && $(SNAKEMAKE) atlas $$args $(QUIET)

# The fast set (every test but the integration set: 6 to 17 minutes on 2 cores, 337 s, 903 s and
# 988 s in fresh clones on three machines); test-integration runs the integration set (the newest 80-shape
# record replayed, the SLURM cluster, the browser) but its per-record replays, which test-records
# runs; test-all runs every test. CI runs test and test-integration. Each prints its 15 slowest.
# Workers (pytest-xdist, one per core); they share the one smoke replay (tests/conftest.py).
PYTEST_ARGS ?= --durations=15 -n auto
test: $(VENV)/.installed
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

test-all: $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

test-integration: $(VENV)/.installed
	$(PY) -m pytest -m "integration and not records" $(PYTEST_ARGS)

# Every committed record's `make replay` from scratch, one test each (marker records): the check
# that an older record still replays under today's code. Several minutes a record on 2 cores, so
# it is run before a change to what a replay reads lands, not on every change.
test-records: $(VENV)/.installed
	$(PY) -m pytest -m records $(PYTEST_ARGS)

# The report Snakemake bundles, written to reports/ (a bare `snakemake --report` would drop a
# large report.html at the top of the checkout).
report: $(VENV)/.installed
	@$(WITH_RECORD) $(SNAKEMAKE) atlas report_assets $$args $(QUIET) && \
	  $(SNAKEMAKE) $$args --report reports/atlas.html $(QUIET)

# Re-hash every output the last `make atlas` indexed; never reruns anything first, so a changed
# file is reported rather than re-indexed.
verify: $(VENV)/.installed
	@$(WITH_RECORD) $(SNAKEMAKE) verify_provenance $$args $(QUIET)

# In a replay overhead_probe, unseen_probe, network_probe and epilogue_probe each read the newest record of the
# device that holds their samples, named in one line, beside the atlas's results; where none
# does, that line says so and they exit 0 with nothing made.
mobilenet_probe nsight compare_records overhead_probe network_probe unseen_probe epilogue_probe: \
		$(VENV)/.installed
	@$(WITH_RECORD) $(SNAKEMAKE) $@ $$args $(QUIET)

# The op's launch tables from a record (default: the newest of the device that has tables) into
# workflow/groupconv/tables/<GPU name>.json, the package data an installed conv2d
# reads; rerun whatever the files' times (a record is older than the file it replaces). Commit it.
export_tables: $(VENV)/.installed
	@$(WITH_RECORD) $(SNAKEMAKE) export_tables --forcerun export_table $$args $(QUIET)

replay: $(VENV)/.installed
	@test -n "$(RECORD)" || { echo "make replay RECORD=<name>: one of $$(ls records | grep -v INDEX | tr '\n' ' ')"; exit 2; }
	@$(WITH_RECORD) echo "snakemake atlas $$args" && $(SNAKEMAKE) atlas $$args $(QUIET)

clean:
	rm -rf results/*/ .snakemake
