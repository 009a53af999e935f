#!/bin/sh
# client.sh OUT POLYPATH NAME SERVER_ADDR IFACE... : client gateway NAME (token NAME-token,
# the server's certificate pinned) with one --interface per IFACE, until OUT/done.
out=$1; bin=$2; name=$3; server=$4; shift 4
. "$(dirname "$0")/lib.sh"
wait_for "$out/cert.pem" || { echo "no server certificate" >&2; exit 1; }
ifaces=""
for i in "$@"; do ifaces="$ifaces --interface $i"; done
RUST_LOG=${RUST_LOG:-info} "$bin" gw client --server "$server" --name "$name" \
  --token "$name-token" --pin "$out/cert.pem" --status 127.0.0.1:9101 \
  --decision-log "$out/decisions-$name.jsonl" $ifaces > "$out/gwc-$name.out" 2> "$out/gwc-$name.log" &
pid=$!
wait_done $pid
curl -s -m 2 http://127.0.0.1:9101/metrics > "$out/gwc-$name-metrics.txt"
curl -s -m 2 http://127.0.0.1:9101/status > "$out/gwc-$name-status.json"
stop $pid
