# polypath: the two commands a newcomer needs.
#   make demo   build, run the lab's paper reproductions on bundled defaults, print the
#               tables and write report/index.md (+ PNG plots, summary.json)
#   make test   install what the tests need, then run every test
#   make fuzz   run every cargo-fuzz target for FUZZ_SECONDS each (default 600), one at a
#               time (FUZZ_TARGETS="a b" picks some); needs the nightly toolchain
#   make bench-server   1000 clients x 8 MB uploads to one server: memory with glibc and jemalloc
#   make bench-sweep    jobs per minute of the lab's sweep backends (local pool, local Ray)
CARGO ?= cargo
PYTHON ?= python3
VENV := lab/.venv
LAB_PY := $(VENV)/bin/python

.PHONY: build demo test lint lab-deps system-deps fuzz bench-server bench-sweep

build:
	$(CARGO) build --release -p polypath

# The lab's Python environment: what the experiments need (matplotlib, tomli-w, pyarrow
# from PyPI), then for the tests and the sweeps' Ray backend pytest and Ray too.
$(VENV)/.base: lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e lab
	touch $@

$(VENV)/.installed: $(VENV)/.base
	$(VENV)/bin/pip install --quiet -e 'lab[test,ray]'
	touch $@

lab-deps: $(VENV)/.installed

# Debian packages the emulator and its tests use: iproute2 (namespaces, routes, MPTCP
# endpoints), procps (sysctl inside a namespace), iputils-ping, python3, iptables (the
# M2HO daemon's NFQUEUE rules), curl and nftables (the gateway's NAT and its tests' HTTP
# client), shellcheck (the interop runner's run_endpoint.sh is checked with it). Installed
# when missing and running as root (CI is root); otherwise the tests say why they skip.
EMU_DEBS := iproute2:ip procps:sysctl iputils-ping:ping python3:python3 iptables:iptables curl:curl nftables:nft shellcheck:shellcheck
system-deps:
	@missing=""; for d in $(EMU_DEBS); do command -v $${d#*:} >/dev/null 2>&1 || missing="$$missing $${d%%:*}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "note: not root, not installing$$missing: the emulator tests will skip"; fi; \
	fi

# The release build, the lab's environment and the emulator's Debian packages (mostly
# downloads) side by side.
demo:
	$(MAKE) -j2 build $(VENV)/.base system-deps
	POLYPATH_BIN=target/release/polypath $(LAB_PY) -m polypath_lab run all --out report

# One feature set for lint and tests: the simulator's noq peer (test-only) is on, so one
# build serves clippy's every target, every test and the binary the lab tests run.
FEATURES := --features polypath-sim/noq

lint:
	$(CARGO) fmt --all -- --check
	$(PYTHON) tools/spec_quotes.py
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings

test: lint lab-deps system-deps
	$(CARGO) test --workspace $(FEATURES)
	# The lab's tests use the polypath binary the workspace tests built (for the CLI's
	# integration tests): building it again alone would recompile a dozen crates.
	test -x target/debug/polypath
	POLYPATH_BIN=target/debug/polypath $(LAB_PY) -m pytest -q lab/tests tools

# The server under 1000 concurrent 8 MB uploads, with glibc malloc and then with jemalloc
# (Debian's libjemalloc2, installed when missing and running as root): peak and after-load
# memory of each.
JEMALLOC := /usr/lib/x86_64-linux-gnu/libjemalloc.so.2
bench-server: build
	@test -e $(JEMALLOC) || [ "$$(id -u)" != 0 ] || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjemalloc2 >/dev/null; }
	target/release/polypath bench server --clients 1000 --size 8MB
	@if test -e $(JEMALLOC); then target/release/polypath bench server --clients 1000 --size 8MB --preload $(JEMALLOC); \
	  else echo "no $(JEMALLOC): the jemalloc run is skipped"; fi

# The same small campaign (24 NR-DC downloads) with the sweep's local backend and on a
# local Ray instance: each backend's jobs per minute, and whether their tables are identical.
bench-sweep: build lab-deps
	POLYPATH_BIN=target/release/polypath $(LAB_PY) -m polypath_lab.sweep.bench

# Coverage-guided fuzzing (cargo-fuzz, nightly). Each target's body is a function of
# crates/fuzz (polypath-fuzz), whose tests run it briefly in `make test`. The corpus starts
# from that crate's seeds; a target that finds a crash stops the run (the input is in
# fuzz/artifacts/<target>/). Logs go to fuzz/logs/<target>.log, and the last line of each
# (libFuzzer's "Done N runs in S second(s)") is printed at the end.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?=
NIGHTLY ?= +nightly
fuzz:
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	$(CARGO) run -q -p polypath-fuzz --example write_corpus -- fuzz/corpus
	@mkdir -p fuzz/logs
	@targets="$(FUZZ_TARGETS)"; [ -n "$$targets" ] || targets=$$($(CARGO) $(NIGHTLY) fuzz list); \
	for t in $$targets; do \
	  echo "== $$t: $(FUZZ_SECONDS) s"; \
	  $(CARGO) $(NIGHTLY) fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    > fuzz/logs/$$t.log 2>&1 || { tail -40 fuzz/logs/$$t.log; exit 1; }; \
	  grep -h "^Done" fuzz/logs/$$t.log; \
	done
