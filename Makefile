# longhaul: `make run` runs config.toml's profiles on the embedded lab; `make test` runs the tests.
# Both install what is missing first (Debian packages, the virtualenv, the C helpers) and are
# idempotent. Run as root on Debian 12.

VENV      ?= .venv
PYTHON    ?= python3
BIN       := build/bin
STAMP     := $(VENV)/.longhaul-installed
DEBSTAMP  := build/.debian-packages
CONFIG    ?= config.toml
PYTEST_ARGS ?=
# Each setup step prints one line; its whole output is in build/setup-logs/<step>.log
LOGS      := build/setup-logs
STEP      := bash appliance/setup/step.sh
# Two jobs: on a cold machine the image (downloads, dpkg, pip) and InfluxDB 2's build (compilers, at
# nice 19) overlap instead of adding up (6.5 and 11.5 minutes cold); step.sh writes each step's line
# whole when it ends, and pytest's output streams as it runs (no --output-sync, which held it back)
MAKEFLAGS += --jobs=2

.PHONY: all setup deps venv helpers helper-files bpf telegraf influxd2 image run vm-run test lint check clean-lab bench distclean

all: setup

setup: deps venv helpers bpf telegraf

deps: $(DEBSTAMP)
$(DEBSTAMP): appliance/setup/debian-packages.txt appliance/setup/install-debian-packages.sh
	@$(STEP) "Debian packages" $(LOGS)/packages.log \
		bash appliance/setup/install-debian-packages.sh appliance/setup/debian-packages.txt
	@mkdir -p $(dir $@) && touch $@

venv: $(STAMP)
$(STAMP): pyproject.toml $(DEBSTAMP)
	@$(STEP) "virtualenv $(VENV) with longhaul" $(LOGS)/venv.log sh -c '\
		{ test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV); } && \
		$(VENV)/bin/pip install --disable-pip-version-check --upgrade pip && \
		$(VENV)/bin/pip install --disable-pip-version-check -e ".[test]"'
	@touch $@

# the C/C++ helpers, one line for all (make's own output goes to the step's log)
helpers: $(DEBSTAMP)
	@$(STEP) "C helpers in build/" $(LOGS)/helpers.log $(MAKE) --no-print-directory helper-files

helper-files: $(BIN)/longhaul-delayline $(BIN)/longhaul-pacedudp $(BIN)/longhaul-udtperf $(BIN)/longhaul-tcpinfo $(BIN)/longhaul-nfswrite build/lib/liblonghaul_dtw.so build/lib/liblonghaul_ccashim.so build/lib/liblonghaul_plansim.so
$(BIN)/longhaul-delayline: hardware/delayline/delayline.c hardware/delayline/Makefile $(DEBSTAMP)
	$(MAKE) -C hardware/delayline OUT=$(abspath $(BIN))
$(BIN)/longhaul-pacedudp: $(wildcard drivers/pacedudp/*.c drivers/pacedudp/*.h) drivers/pacedudp/Makefile $(DEBSTAMP)
	$(MAKE) -C drivers/pacedudp OUT=$(abspath $(BIN))
$(BIN)/longhaul-tcpinfo: drivers/tcpinfo/tcpinfo.c drivers/tcpinfo/Makefile $(DEBSTAMP)
	$(MAKE) -C drivers/tcpinfo OUT=$(abspath $(BIN))
$(BIN)/longhaul-nfswrite: drivers/nfswrite/nfswrite.c drivers/nfswrite/Makefile $(DEBSTAMP)
	$(MAKE) -C drivers/nfswrite OUT=$(abspath $(BIN))
$(BIN)/longhaul-udtperf: drivers/udt/udtperf.cpp drivers/udt/Makefile $(DEBSTAMP)
	$(MAKE) -C drivers/udt OUT=$(abspath $(BIN))
build/lib/liblonghaul_dtw.so: collectors/studies/ops/dtw/dtw.c collectors/studies/ops/dtw/Makefile $(DEBSTAMP)
	$(MAKE) -C collectors/studies/ops/dtw OUT=$(abspath build/lib)
build/lib/liblonghaul_plansim.so: collectors/studies/planning/plansim/plansim.c collectors/studies/planning/plansim/Makefile $(DEBSTAMP)
	$(MAKE) -C collectors/studies/planning/plansim OUT=$(abspath build/lib)
build/lib/liblonghaul_ccashim.so: drivers/ccashim/ccashim.c drivers/ccashim/Makefile $(DEBSTAMP)
	$(MAKE) -C drivers/ccashim OUT=$(abspath build/lib)
# longhaul's BPF congestion controls (hardware/bpf_ccas.py), where the kernel has BTF
bpf: $(DEBSTAMP)
	@$(STEP) "BPF congestion controls in build/bpf" $(LOGS)/bpf.log bash appliance/setup/build-bpf.sh build/bpf

# Optional: Telegraf with longhaul's plugins only, where a Go >= 1.25 is here (the machine's own
# module proxy; the binary is cached in /var/cache/longhaul/telegraf, so a fresh clone copies it in
# a second); elsewhere `telegraf` on PATH (InfluxData's package) is used (docs/telemetry.md)
telegraf: $(DEBSTAMP)
	@$(STEP) "Telegraf (optional)" $(LOGS)/telegraf.log bash appliance/setup/build-telegraf.sh $(BIN)

# Optional: InfluxDB 2.x for the tests of the 2.x path (Debian has 1.x only), where Go and Rust
# are here; cached in /var/cache/longhaul, kept out of build/bin, which the appliance image copies
influxd2: $(DEBSTAMP)
	@$(STEP) "InfluxDB 2.x for the tests (optional)" $(LOGS)/influxd2.log sh tests/servers/build-influxd2.sh build/test-bin

# the appliance image (appliance/image/): base cached in /var/cache/longhaul/image, rebuilt
# only when this checkout changed
image: setup
	@$(STEP) "appliance image in build/image" $(LOGS)/image.log \
		$(VENV)/bin/python -m longhaul.appliance.image.build --out build/image

run: setup
	$(VENV)/bin/longhaul run --config $(CONFIG)

# the smoke profile on VMs booted from the image (the qemu lab backend)
vm-run: image
	$(VENV)/bin/longhaul run --config config-vm.toml

check: setup
	$(VENV)/bin/longhaul check --config $(CONFIG)

# Two passes: the tests that build no lab on both cores (pytest-xdist: 114 s against 205 s in one
# process), then the lab tests alone, one at a time, since they measure timing on this machine's two
# cores. Exit 5 is "nothing selected" (PYTEST_ARGS naming only lab tests, or none).
test: influxd2 setup lint image
	$(VENV)/bin/python -m pytest -m "not lab" --numprocesses=2 $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(VENV)/bin/python -m pytest -m lab $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The layer contracts (pyproject's [tool.importlinter]), ruff, and mypy over the contracts and the run
# path (pyproject's [tool.mypy]); a violation fails `make test`.
lint: venv
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	@# mypy finds `longhaul` through a link to package/ (the install maps it by an import hook it cannot read)
	@mkdir -p build/typecheck && ln -sfn ../../package build/typecheck/longhaul
	MYPYPATH=build/typecheck $(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[bench]'
	$(VENV)/bin/python bench/run_all.py
	$(VENV)/bin/python bench/overhead.py
	$(VENV)/bin/python bench/sampler_cost.py 0.01
	$(VENV)/bin/python bench/analyze_profile.py
	$(VENV)/bin/python bench/dtw_knn.py

clean-lab: setup
	$(VENV)/bin/longhaul clean

distclean:
	rm -rf $(VENV) build
