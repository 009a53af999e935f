#!/bin/sh
# work-cbr.sh OUT POLYPATH NAME DST PORT COUNT RATE SIZE SERVER IFACE...: client gateway
# NAME (with one --interface per IFACE) carries COUNT numbered UDP packets of SIZE bytes at
# RATE per second to DST:PORT (`polypath udp send`); then OUT/done.
out=$1; bin=$2; name=$3; dst=$4; port=$5; count=$6; rate=$7; size=$8; server=$9; shift 9
. "$(dirname "$0")/lib.sh"
trap 'touch "$out/done"' EXIT
date +%s.%N > "$out/work-start"
start_client "$name" "$server" "$@" || exit 1
wait_ready "$name" || { echo "$name: the tunnel did not come up" >&2; exit 1; }
# The receiver is up before the first packet.
wait_for "$out/udp-$port.json" 10
"$bin" udp send --to "$dst:$port" --count "$count" --rate "$rate" --size "$size" > "$out/udp-send-$port.json" 2>&1
sleep 1
stop_client "$name"
