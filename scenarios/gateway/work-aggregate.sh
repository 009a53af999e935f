#!/bin/sh
# work-aggregate.sh OUT POLYPATH DST SECONDS SERVER IFACE...: a bulk TCP transfer of SECONDS
# to DST:5201 through the gateway three times: with client `agg-eth` (Ethernet only),
# `agg-wifi` (Wi-Fi only) and `aggregate` (both); each client gateway runs for its transfer
# only. Then OUT/done.
out=$1; bin=$2; dst=$3; seconds=$4; server=$5; shift 5
. "$(dirname "$0")/lib.sh"
trap 'touch "$out/done"' EXIT
date +%s.%N > "$out/work-start"
for name in agg-eth agg-wifi aggregate; do
  start_client "$name" "$server" "$@" || exit 1
  wait_ready "$name" || { echo "$name: the tunnel did not come up" >&2; exit 1; }
  "$bin" tcp send --connect "$dst:5201" --time "${seconds}s" --json > "$out/tcp-$name.json" 2> "$out/tcp-$name.log"
  stop_client "$name"
done
