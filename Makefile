# SPDX-License-Identifier: Apache-2.0
# One command from a fresh clone: `make test` creates .venv (once; re-runs only when requirements.lock
# changes) and runs the whole CPU suite. Package downloads are cached by pip (~/.cache/pip).

SHELL := /bin/bash
VENV ?= .venv
# python3.12 on PATH, else a pyenv-installed 3.12 (pyenv shims can exist without a selected version).
PYTHON ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
             $$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$p; break; }; done)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

PORT ?= 20000
# make serve listens on loopback unless told otherwise (HOST=0.0.0.0 accepts other machines).
HOST ?= 127.0.0.1
GR00T_VERSION ?= n15

.PHONY: venv fleet-venv test-fleet fleet-demo bench-fleet test lint test-tt-full demo bench-protocols robot-demo bench-batching rtc-rollout bench-peer serve bench-reference bench-backend bench-cpu-bf16 estimate-tt-accuracy clean-venv

venv: $(STAMP)

$(STAMP): requirements.lock
	@test -n "$(PYTHON)" || { echo "error: python3.12 not found (install it, or pass PYTHON=/path/to/python3.12)"; exit 1; }
	@echo "==> creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	@# Put code/ on the venv's import path (the port keeps tt-metal's models.* namespace layout).
	echo "$(CURDIR)/code" > $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gr00t_p150_code.pth
	touch $(STAMP)

# The default run: every CPU test plus the TT port on the mock P150 at tiny scale (full-size work is
# marked slow and kept out).
test: $(STAMP)
	$(PY) -m pytest -m "not slow and not fleet" $(PYTEST_ARGS)

# ruff with the rules in pyproject.toml (pycodestyle at 120 columns, pyflakes, bugbear, unused noqa);
# CI runs it before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check code

# The full-size N1.5 model through every TT module on the mock P150 (≈7 GB synthetic checkpoint
# generated into a temporary GR00T_CACHE, converted, run); the full-size N1.6 model for GR1 stage by stage from its
# ≈6.6 GB synthetic checkpoint (the device tests' copy under ~/.cache/gr00t-p150 when present, else generated into
# the temporary GR00T_CACHE) with its census, trace safety and program budgets; the full-size N1.7 modules and whole
# model stage by stage with its trace-safety check (converted shapes allocated on the mock, no checkpoint);
# and the batch-2 and batch-4 buckets of N1.5 / N1.7 (per-bucket roofline sheets); ~6 min, ~7.5 GB RAM. CI runs it
# after `test`.
test-tt-full: $(STAMP)
	$(PY) -m pytest -m slow -s code/models/experimental/gr00t/tests/mock/test_tt_full_size.py code/models/experimental/gr00t/tests/mock/test_tt_full_size_n16.py code/models/experimental/gr00t/tests/mock/test_tt_full_size_n17.py code/models/experimental/gr00t/tests/mock/test_tt_full_size_buckets.py $(PYTEST_ARGS)

# Boot the server on synthetic:tiny weights, smoke-test and benchmark it, stop it.
# Variants: make demo DEMO_WEIGHTS=synthetic:full DEMO_N=10
demo: $(STAMP)
	PYTHON=$(PY) code/scripts/demo/demo.sh $(GR00T_VERSION) $(or $(DEMO_WEIGHTS),synthetic:tiny) $(or $(DEMO_N),20)

# Per-request overhead of HTTP/JSON, ZMQ (GR00T PolicyServer) and openpi websocket on one synthetic:tiny server;
# and a simulated 30 Hz robot over each protocol for 20 s (SERVING.md §11; ROBOT_RTC=1 adds an HTTP session with
# server-side RTC, §12). BENCH_JSON=<file> keeps the results.
bench-protocols: $(STAMP)
	PYTHON=$(PY) code/scripts/demo/protocols_demo.sh $(GR00T_VERSION) bench --n $(or $(DEMO_N),40) $(if $(BENCH_JSON),--json $(BENCH_JSON))

robot-demo: $(STAMP)
	PYTHON=$(PY) code/scripts/demo/protocols_demo.sh $(GR00T_VERSION) robot --seconds $(or $(ROBOT_SECONDS),20) $(foreach v,$(ROBOT_RTC),--rtc $(v)) $(if $(BENCH_JSON),--json $(BENCH_JSON))

# Micro-batching: 1/2/4/8 closed-loop 30 Hz robots, unbatched vs batched servers in one run (SERVING.md §13).
# Full size: make bench-batching BATCH_WEIGHTS=synthetic:full BATCH_SECONDS=1 BATCH_MIN=2
# The fast path: BATCH_PATH=fast (on a GPU also BATCH_DTYPE=bfloat16: static buckets with CUDA graphs)
bench-batching: $(STAMP)
	$(PY) code/scripts/bench/bench_batching.py --version $(GR00T_VERSION) --weights $(or $(BATCH_WEIGHTS),synthetic:tiny) --seconds $(or $(BATCH_SECONDS),10) --min-requests $(or $(BATCH_MIN),3) --torch-path $(or $(BATCH_PATH),reference) --torch-dtype $(or $(BATCH_DTYPE),float32) $(if $(BENCH_JSON),--json $(BENCH_JSON))

# RTC evidence: 10-chunk rollouts, naive vs inpaint vs guided, both versions, random tiny weights (SERVING.md §12).
rtc-rollout: $(STAMP)
	$(PY) code/scripts/demo/rtc_rollout.py --out-json $(or $(BENCH_JSON),benchmarks/results/rtc_rollout.json)

# Ourselves vs LeRobot 0.6.1's GR00T N1.7 in one run on this machine (full size, CPU: fp32 and bf16 sides of each;
# builds .venv-peer once).
bench-peer: $(STAMP)
	PYTHONPATH=code:code/scripts $(PY) code/scripts/bench/bench_peer.py --rounds $(or $(PEER_ROUNDS),2) --calls $(or $(PEER_CALLS),3) $(if $(BENCH_JSON),--json $(BENCH_JSON))

# Serve real weights (GR00T_WEIGHTS=hub by default: the pinned snapshot from the Hugging Face cache).
serve: $(STAMP)
	GR00T_VERSION=$(GR00T_VERSION) PYTHONPATH=code $(PY) -m uvicorn --host $(HOST) --port $(PORT) --http gr00t_p150.server.web.h11:GuardedH11Protocol gr00t_p150.server.app:app

# Host estimate of the TT-NN port's accuracy (not a device measurement): golden-op execution with
# device-rounded weights and bf16 activations (and HiFi2's activation truncation) vs the fp32 reference,
# full-size synthetic checkpoint of GR00T_VERSION (~11 GB RAM for n15, ~14 GB for n17).
estimate-tt-accuracy: $(STAMP)
	$(PY) code/scripts/bench/estimate_tt_accuracy.py --version $(GR00T_VERSION) --json benchmarks/results/tt_accuracy_estimate_$(GR00T_VERSION)_full.json

bench-reference: $(STAMP)
	$(PY) code/scripts/bench/bench_reference.py --version $(GR00T_VERSION)

# Plain reference vs torch fast path, same process (CPU, full-size synthetic checkpoint).
bench-backend: $(STAMP)
	$(PY) code/scripts/bench/bench_backend.py --version $(GR00T_VERSION)

# The CPU's three torch paths in one process: fp32 reference, fp32 fast, bf16 fast (+ bf16's accuracy over seeds),
# then the bf16 path's stages against their GEMM floor and its top ops (full size; ~5 min for n15, ~10 for n17).
bench-cpu-bf16: $(STAMP)
	$(PY) code/scripts/bench/bench_backend.py --version $(GR00T_VERSION) --dtype bfloat16 --n 3 --warmup 1 --threads 2
	$(PY) code/scripts/bench/profile_cpu_bf16.py --version $(GR00T_VERSION) --json benchmarks/results/profile_cpu_bf16_$(GR00T_VERSION)_full.json

# The fleet (FLEET.md): Ray Serve is an optional extra, kept out of .venv so that the single server, its container
# and its tests never see it. .venv-fleet is an overlay: its own interpreter, .venv's packages through a .pth, and
# requirements-fleet.lock's packages (ray[serve] and what it adds) installed --no-deps on top.
FLEET_VENV ?= .venv-fleet
FLEET_PY := $(FLEET_VENV)/bin/python
FLEET_STAMP := $(FLEET_VENV)/.installed

fleet-venv: $(FLEET_STAMP)

$(FLEET_STAMP): $(STAMP) requirements-fleet.lock
	@echo "==> creating $(FLEET_VENV) (Ray Serve) over $(VENV)"
	rm -rf $(FLEET_VENV)
	$(PYTHON) -m venv $(FLEET_VENV)
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" > $$($(FLEET_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gr00t_base_venv.pth
	$(FLEET_PY) -m pip install --quiet --no-deps -r requirements-fleet.lock
	$(FLEET_PY) -m pip check
	touch $(FLEET_STAMP)

# The fleet's tests: a real local Ray cluster, 2 CPU replicas on synthetic:tiny weights (~3 min on 2 cores).
test-fleet: $(FLEET_STAMP)
	$(FLEET_PY) -m pytest -m fleet code/gr00t_fleet/tests $(PYTEST_ARGS)

# The fleet vs the single server on this machine (synthetic:tiny, fp32, ~2 min): the ingress hop's overhead (1 replica,
# interleaved) and 4 closed-loop clients against single / 1 / 2 replicas; BENCH_JSON and media/fleet_overhead.png.
bench-fleet: $(FLEET_STAMP)
	$(FLEET_PY) code/scripts/bench/bench_fleet.py --json $(or $(BENCH_JSON),benchmarks/results/fleet_bench.json)

# 2 local replicas (synthetic:tiny), 4 simulated robots against the ingress, one replica killed at 8 s (FLEET.md).
fleet-demo: $(FLEET_STAMP)
	$(FLEET_PY) code/scripts/demo/fleet_demo.py --robots $(or $(FLEET_ROBOTS),4) --seconds $(or $(FLEET_SECONDS),20) --kill-at $(or $(FLEET_KILL_AT),8) $(if $(BENCH_JSON),--json $(BENCH_JSON))

clean-venv:
	rm -rf $(VENV) $(FLEET_VENV)
