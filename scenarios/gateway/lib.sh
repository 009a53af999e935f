# Shell helpers of the gateway scenarios (sourced). Every process a script starts is
# stopped by the same script, by its pid, once "$out/done" exists (the workload's end).
# The functions keep their variables `local`: they must not change the caller's.

# wait_for FILE [SECONDS]: waits until FILE exists and is not empty (default 30 s).
wait_for() {
  local tries=$(( ${2:-30} * 20 ))
  while [ ! -s "$1" ] && [ $tries -gt 0 ]; do sleep 0.05; tries=$((tries - 1)); done
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
  local tries=1200
  while ! grep -q '"ready"' "$out/gwc-$1.out" 2>/dev/null && [ $tries -gt 0 ]; do sleep 0.05; tries=$((tries - 1)); done
  grep -q '"ready"' "$out/gwc-$1.out" 2>/dev/null
}

# wait_paths COUNT: waits until the client gateway's status (127.0.0.1:9101) lists COUNT
# validated paths (30 s at most): "ready" comes with the first path, the others open after
# it, and a path carries application data only once its validation is answered (a lost
# PATH_CHALLENGE is sent again a PTO later, about a second at the start).
wait_paths() {
  local tries=600
  while [ "$(curl -s -m 1 http://127.0.0.1:9101/status | grep -o '"state": "validated"' | wc -l)" -lt "$1" ] \
    && [ $tries -gt 0 ]; do sleep 0.05; tries=$((tries - 1)); done
  [ $tries -gt 0 ]
}

# start_client NAME SERVER_ADDR IFACE...: starts client gateway NAME (token NAME-token, the
# server's certificate pinned, status on 127.0.0.1:9101) with one --interface per IFACE;
# sets $client_pid. Its output goes to $out/gwc-NAME.out and .log.
start_client() {
  local cname=$1 cserver=$2 ifaces="" i
  shift 2
  wait_for "$out/cert.pem" || { echo "no server certificate" >&2; return 1; }
  # The server is listening once it says so (its NAT and TUN set-up can take seconds on a
  # busy machine, longer than a client waits for its hello's answer).
  wait_for "$out/gws.out" 60 || { echo "the server gateway is not listening" >&2; return 1; }
  for i in "$@"; do ifaces="$ifaces --interface $i"; done
  RUST_LOG=${RUST_LOG:-info} "$bin" gw client --server "$cserver" --name "$cname" --cc "${GW_CC:-bbr}" \
    --token "$cname-token" --pin "$out/cert.pem" --status 127.0.0.1:9101 \
    --decision-log "$out/decisions-$cname.jsonl" $ifaces > "$out/gwc-$cname.out" 2> "$out/gwc-$cname.log" &
  client_pid=$!
}

# stop_client NAME: saves client NAME's metrics and status and its TUN device's counters
# (the kernel's drops of packets the gateway did not read in time), then stops it.
stop_client() {
  curl -s -m 2 http://127.0.0.1:9101/metrics > "$out/gwc-$1-metrics.txt"
  curl -s -m 2 http://127.0.0.1:9101/status > "$out/gwc-$1-status.json"
  ip -s -j link show dev gw0 > "$out/gwc-$1-tun.json" 2>/dev/null
  stop $client_pid
}
