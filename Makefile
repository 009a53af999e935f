# polypath: the two commands a newcomer needs.
#   make demo   build, then run the main job on bundled defaults and print its result
#   make test   install what the tests need, then run every test
CARGO ?= cargo

.PHONY: build demo test lint

build:
	$(CARGO) build --release -p polypath

demo: build
	./target/release/polypath sim run scenarios/handover-two-gnb.toml --out report/handover-two-gnb --events report/handover-two-gnb/events.jsonl --json

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p polypath-sim --features noq --all-targets -- -D warnings

test: lint
	$(CARGO) test --workspace
	$(CARGO) test -p polypath-sim --features noq --test quic
