#!/bin/sh
# server.sh OUT POLYPATH CONFIG [STATUS_ADDR]: the server gateway, until OUT/done.
out=$1; bin=$2; config=$3; status=${4:-127.0.0.1:9100}
. "$(dirname "$0")/lib.sh"
RUST_LOG=${RUST_LOG:-info} "$bin" gw server --config "$config" --cc "${GW_CC:-bbr}" --cert-out "$out/cert.pem" \
  --status "$status" > "$out/gws.out" 2> "$out/gws.log" &
pid=$!
wait_done $pid
curl -s -m 2 "http://$status/metrics" > "$out/gws-metrics.txt"
curl -s -m 2 "http://$status/status" > "$out/gws-status.json"
# The clients stop first (they end their sessions), then the server.
sleep 1
stop $pid
