# tierbench: `make run` runs the default experiment end to end, `make test` runs every test.
# Variables can be overridden: make run EXP=experiments/quick.yml
EXP ?= quick
# make test leaves out the longer cluster-lab tests (marker lab_full) and the stack tests that repeat
# what a faster one covers (marker full); make test-cluster runs them.
# The tests that need neither Docker nor namespaces run on two processes (pytest-xdist); the
# namespace and stack tests then one at a time (they share the engine, the stack and the host's
# interfaces, and their timings must not compete). PYTEST_ARGS go to both, e.g. a file of tests:
# a part with none of its tests selected passes (pytest's exit code 5).
# Each part lists its slowest tests at the end (--durations): what to move behind `full` when CI grows.
PYTEST_ARGS ?=
UNIT_TESTS := -m "not lab_full and not full and not stack and not netns and not timing" -n 2 --durations=10
HOST_TESTS := -m "(stack or netns or timing) and not lab_full and not full" --durations=25
# The shipped example run: the one folder under examples/quick/ (make example records it again).
EXAMPLE ?= $(patsubst %/summary.csv,%,$(lastword $(sort $(wildcard examples/quick/*/summary.csv))))
VENV := .venv/bin

.DEFAULT_GOAL := help
.PHONY: help run test plan study advise clean setup setup-run setup-venv setup-dev images \
  orangefs-image pfs-up lint bench report-example example example-study bench-scale test-cluster

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: setup-run ## Set up what is missing, build the images EXP needs, bring the stack up, run EXP (default quick), write the report
	$(VENV)/tierbench run $(EXP)

test: setup images ## Lint (ruff, mypy), unit tests, namespace tests and the real stack end to end
	$(VENV)/ruff check tierbench workloads analysis tests
	$(VENV)/mypy
	$(VENV)/pytest $(UNIT_TESTS) $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(VENV)/pytest $(HOST_TESTS) $(PYTEST_ARGS) || [ $$? -eq 5 ]

test-cluster: setup images ## The cluster-lab tests in full and the stack tests make test leaves out as repeats (tests/README.md)
	$(VENV)/pytest tests/test_cluster.py tests/test_cluster_lab.py tests/test_rack_lab.py \
	  tests/test_fs_cluster_lab.py \
	  tests/test_disks_cluster_lab.py tests/test_net_cluster_lab.py \
	  tests/test_web_servers_cluster_lab.py tests/test_proxies_cluster_lab.py \
	  tests/test_advise_cluster_lab.py tests/test_quick_lab.py tests/test_profile_cluster_lab.py \
	  tests/test_rollback_lab.py
	$(VENV)/pytest -m full

plan: setup-venv ## Dry run of EXP: the points in order and the estimated duration
	$(VENV)/tierbench plan $(EXP)

STUDY ?= 004
SCALE ?= 1
ROWS ?=
study: setup images ## Every experiment of STUDY (000-004) in the paper's order, one study report; SCALE=0.1 shortens, ROWS=A,B runs a part
	$(VENV)/tierbench study $(STUDY) --scale $(SCALE) $(if $(ROWS),--rows $(ROWS))

BUDGET ?= 30
WORKLOADS ?=
advise: setup images ## Which offloads help which workload on these interfaces, measured within BUDGET minutes (advice.html)
	$(VENV)/tierbench advise --budget-min $(BUDGET) $(if $(WORKLOADS),--workloads $(WORKLOADS)) $(if $(FROM),--from $(FROM))

clean: setup-venv ## Restore interface settings a crashed run left changed, remove the stack
	$(VENV)/tierbench clean

setup: ## Docker engine and Compose v2, host tools, the Python environment (.venv) with the test tools
	setup/docker.sh
	setup/host-tools.sh tests
	setup/venv.sh dev

# What make run needs: the engine, the host tools a run uses, .venv without the test tools, and
# the images EXP needs (RUN_IMAGES, quick's by default): these build while .venv is set up, in
# parallel (from a fresh clone here, 31 s for both instead of 40 s one after the other, quick's
# images built from nothing: docs/results.md); `tierbench run` builds whatever
# else its experiment needs, and finds these up to date in seconds. tests/test_commands.py checks
# the list against quick's stack.
RUN_IMAGES ?= $(if $(filter quick,$(EXP)),loadgen proxy web)
setup-run:
	setup/docker.sh
	setup/host-tools.sh
	$(if $(strip $(RUN_IMAGES)),setup/images.sh $(RUN_IMAGES) & images=$$!; \
	  setup/venv.sh || { wait $$images; exit 1; }; wait $$images,setup/venv.sh)

setup-venv:
	@setup/venv.sh

setup-dev:
	@setup/venv.sh dev

images: ## Build every image that is missing or out of date (bootstraps a local Debian base when none can be pulled)
	setup/images.sh

orangefs-image: setup-run ## OrangeFS image from ORANGEFS_TARBALL, else the upstream archive of the pinned tag, verified against ORANGEFS_SHA256
	setup/orangefs-image.sh

IO ?= 2
CLIENTS ?= 1
pfs-up: orangefs-image ## An OrangeFS cluster by hand: 1 metadata + IO I/O servers (default 2), CLIENTS clients
	$(VENV)/tierbench pfs up --io $(IO) --clients $(CLIENTS)

report-example: setup-venv ## Write the report of the shipped example run (no Docker, nothing is run)
	$(VENV)/tierbench report $(EXAMPLE)

example: setup-run ## Record the shipped example again: run quick, then replace examples/quick/ with that run, trimmed (python -m tierbench.example)
	$(VENV)/tierbench run quick
	$(VENV)/python -m tierbench.example

example-study: setup-venv ## Ship a study's run in examples/studies/ for docs/fidelity.md's scoreboards (STUDY=results/study-ID/<run-id>; ROWS=A,B: only those finished rows)
	@test -n "$(STUDY)" || { echo "make example-study: give STUDY=results/study-ID/<run-id> (a tierbench study's folder)" >&2; exit 2; }
	$(VENV)/python -m tierbench.example --study $(STUDY) $(if $(ROWS),--rows $(ROWS))

BENCH_TARGET ?= http://proxy
BENCH_PATH ?= /single-4096/file.bin
# e.g. BENCH_ARGS="--seconds 3 --rounds 1" for a short check (python -m tierbench.bench --help)
BENCH_ARGS ?=
# the cost of --profile categories: quick without and with it (BENCH_PROFILE_ARGS, e.g. "--rounds 2")
BENCH_PROFILE_ARGS ?= --rounds 1
bench: setup-venv ## Benchmarks: --profile categories' cost on quick's points (runs quick, leaves the stack up), then on that stack the wrk engine vs plain wrk, Locust vs bare FastHttpUser
	$(VENV)/python -m tierbench.bench --profile-cost $(BENCH_PROFILE_ARGS)
	$(VENV)/python -m tierbench.bench --loadgen $$($(VENV)/tierbench project)-loadgen-1 \
	  --results $${TIERBENCH_RESULTS:-results} --target $(BENCH_TARGET) --path $(BENCH_PATH) $(BENCH_ARGS)

SCALE_SIZES ?= 1,4,16
bench-scale: setup-venv ## Scale benchmark: World Cup trace preparation, per-request records and the report at 1, 4 and 16 million records (time, peak memory, ratios)
	$(VENV)/python -m tierbench.scale --sizes $(SCALE_SIZES)

lint: setup-dev ## ruff over the Python code, then mypy over tierbench/ and analysis/ (pyproject.toml)
	$(VENV)/ruff check tierbench workloads analysis tests
	$(VENV)/mypy

NODES ?= 2
.PHONY: lab-up lab-down
lab-up: setup images ## A lab cluster on this machine: NODES node containers (default 2), lab/cluster.yml
	setup/lab.sh up $(NODES)

lab-down: ## Remove the lab cluster (nodes, volumes, network, Docker contexts)
	setup/lab.sh down
