#!/bin/sh
# work-compare.sh OUT POLYPATH DST BYTES SERVER IFACE...: CHYMP against kernel MPTCP on the
# same links (the paper's Figs. 9 to 11). For client `aggregate` (IP packets in DATAGRAM
# frames, aggregated) from 1 s and client `mptcp` (TCP relayed over kernel MPTCP) from
# 21 s of the run: a bulk TCP transfer of 6 s (stable conditions), then from 9 s (29 s) a
# transfer of BYTES during which Wi-Fi fails (the scenario's outages at 11 s and 31 s).
out=$1; bin=$2; dst=$3; bytes=$4; server=$5; shift 5
. "$(dirname "$0")/lib.sh"
trap 'touch "$out/done"' EXIT
date +%s.%N > "$out/work-start"
start=$(date +%s.%N)
# sleep_until T: sleeps until T seconds after this script's start.
sleep_until() {
  local now wait
  now=$(date +%s.%N)
  wait=$(awk -v s="$start" -v t="$1" -v n="$now" 'BEGIN { printf "%.3f", s + t - n }')
  case $wait in -*|0) ;; *) sleep "$wait" ;; esac
}
phase=0
for name in aggregate mptcp; do
  sleep_until $((phase + 1))
  start_client "$name" "$server" "$@" || exit 1
  wait_ready "$name" || { echo "$name: the tunnel did not come up" >&2; exit 1; }
  "$bin" tcp send --connect "$dst:5201" --time 6s --json > "$out/tcp-$name-stable.json" 2> "$out/tcp-$name-stable.log"
  sleep_until $((phase + 9))
  "$bin" tcp send --connect "$dst:5201" --bytes "$bytes" --json > "$out/tcp-$name-failure.json" 2> "$out/tcp-$name-failure.log"
  stop_client "$name"
  phase=$((phase + 20))
done
