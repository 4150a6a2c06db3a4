#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Boot a synthetic:tiny server with HTTP, the GR00T PolicyServer protocol (ZMQ) and the openpi websocket protocol
# on free loopback ports, run one client script against it, stop the server.
#   code/scripts/demo/protocols_demo.sh <n15|n17> bench [bench_protocols.py args]   (make bench-protocols)
#   code/scripts/demo/protocols_demo.sh <n15|n17> robot [robot_loop.py args]        (make robot-demo)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PYTHON=${PYTHON:-.venv/bin/python}
VERSION=${1:?version}; MODE=${2:?bench or robot}; shift 2
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PORT=$(free_port); ZMQ_PORT=$(free_port); OPENPI_PORT=$(free_port)
LOG=$(mktemp -t gr00t-protocols-XXXX.log)
echo "==> booting GR00T_VERSION=$VERSION synthetic:tiny: HTTP :$PORT, ZMQ :$ZMQ_PORT, openpi :$OPENPI_PORT (log: $LOG)"
source code/scripts/operate/serve_local.sh
GR00T_VERSION=$VERSION GR00T_WEIGHTS=synthetic:tiny GR00T_ZMQ_PORT=$ZMQ_PORT GR00T_OPENPI_PORT=$OPENPI_PORT serve_local
URL=http://127.0.0.1:$PORT
case "$MODE" in
  bench) PYTHONPATH=code:code/scripts "$PYTHON" code/scripts/bench/bench_protocols.py --url "$URL" --zmq-port "$ZMQ_PORT" --openpi-port "$OPENPI_PORT" "$@" ;;
  robot) PYTHONPATH=code:code/scripts "$PYTHON" code/scripts/demo/robot_loop.py --url "$URL" --zmq-port "$ZMQ_PORT" --openpi-port "$OPENPI_PORT" \
           --protocol http --protocol zmq --protocol openpi "$@" ;;
  *) echo "mode must be bench or robot" >&2; exit 2 ;;
esac
echo "==> stopping the server"
