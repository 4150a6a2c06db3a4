# SPDX-License-Identifier: Apache-2.0
# Sourced by demo.sh and protocols_demo.sh: boot the server on 127.0.0.1:$PORT in the background (extra
# environment from the caller's exports), stop it on exit, and wait until /health answers (900 s at most).
# Needs PYTHON, PORT and LOG; sets PID.
serve_local() {
  PYTHONPATH=code "$PYTHON" -m uvicorn --host 127.0.0.1 --port "$PORT" \
    --http gr00t_p150.server.web.h11:GuardedH11Protocol gr00t_p150.server.app:app >"$LOG" 2>&1 &
  PID=$!
  trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
  for _ in $(seq 1 900); do
    if ! kill -0 $PID 2>/dev/null; then echo "server exited during boot:"; tail -20 "$LOG"; exit 1; fi
    if "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" 2>/dev/null; then return 0; fi
    sleep 1
  done
  echo "server not ready after 900 s:"; tail -20 "$LOG"; exit 1
}
