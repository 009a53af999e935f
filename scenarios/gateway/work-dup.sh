#!/bin/sh
# work-dup.sh OUT POLYPATH NAME DST COUNT RATE SIZE SERVER IFACE...: client gateway NAME
# carries COUNT numbered UDP packets to DST:6000 and COUNT to DST:6001 at once (two
# duplicated classes over two pairs of links); then OUT/done.
out=$1; bin=$2; name=$3; dst=$4; count=$5; rate=$6; size=$7; server=$8; shift 8
. "$(dirname "$0")/lib.sh"
trap 'touch "$out/done"' EXIT
date +%s.%N > "$out/work-start"
start_client "$name" "$server" "$@" || exit 1
wait_ready "$name" || { echo "$name: the tunnel did not come up" >&2; exit 1; }
# Every datagram is to be sent twice: start once every interface has its path.
wait_paths $# || { echo "$name: not every interface opened its path" >&2; exit 1; }
wait_for "$out/udp-6000.json" 10 && wait_for "$out/udp-6001.json" 10
"$bin" udp send --to "$dst:6000" --count "$count" --rate "$rate" --size "$size" > "$out/udp-send-6000.json" 2>&1 &
a=$!
"$bin" udp send --to "$dst:6001" --count "$count" --rate "$rate" --size "$size" > "$out/udp-send-6001.json" 2>&1 &
b=$!
wait $a; wait $b
sleep 1
stop_client "$name"
