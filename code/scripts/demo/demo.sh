#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Boot the policy server on synthetic weights, run the smoke test and a short HTTP benchmark, stop it.
#   code/scripts/demo/demo.sh [VERSION] [WEIGHTS] [N]     defaults: n15 synthetic:tiny 20
# GR00T_EMBODIMENT (exported) picks the embodiment of a version that serves several (n16).
# Uses $PYTHON (default .venv/bin/python) and a free local port. Random weights: not a policy.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PYTHON=${PYTHON:-.venv/bin/python}
VERSION=${1:-n15}
WEIGHTS=${2:-synthetic:tiny}
N=${3:-20}
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$(mktemp -t gr00t-demo-XXXX.log)
echo "==> booting GR00T_VERSION=$VERSION ${GR00T_EMBODIMENT:+GR00T_EMBODIMENT=$GR00T_EMBODIMENT }GR00T_WEIGHTS=$WEIGHTS on 127.0.0.1:$PORT (log: $LOG)"
source code/scripts/operate/serve_local.sh
GR00T_VERSION=$VERSION GR00T_WEIGHTS=$WEIGHTS serve_local
grep -E "Fidelity gate|ready in" "$LOG" | sed 's/^/    /'
echo "==> smoke test"
"$PYTHON" code/gr00t_p150/server/smoke_test.py --url "http://127.0.0.1:$PORT"
echo "==> HTTP benchmark"
"$PYTHON" code/scripts/bench_http.py --url "http://127.0.0.1:$PORT" --warmup 3 --n "$N" ${BENCH_JSON:+--json "$BENCH_JSON"}
echo "==> stopping the server"
