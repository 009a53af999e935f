# Shell helpers of the gateway scenarios (sourced). Every process a script starts is
# stopped by the same script, by its pid, once "$out/done" exists (the workload's end).

# wait_for FILE [SECONDS]: waits until FILE exists and is not empty (default 30 s).
wait_for() {
  n=$(( ${2:-30} * 20 ))
  while [ ! -s "$1" ] && [ $n -gt 0 ]; do sleep 0.05; n=$((n - 1)); done
  [ -s "$1" ]
}

# wait_done PID: waits for "$out/done" (or for PID to end), then stops PID.
wait_done() {
  while [ ! -e "$out/done" ] && kill -0 "$1" 2>/dev/null; do sleep 0.1; done
}

# stop PID: SIGTERM, then wait for it.
stop() {
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# wait_ready NAME: waits for client gateway NAME's "ready" line (60 s at most).
wait_ready() {
  n=1200
  while ! grep -q '"ready"' "$out/gwc-$1.out" 2>/dev/null && [ $n -gt 0 ]; do sleep 0.05; n=$((n - 1)); done
  grep -q '"ready"' "$out/gwc-$1.out" 2>/dev/null
}
