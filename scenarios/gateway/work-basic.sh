#!/bin/sh
# work-basic.sh OUT POLYPATH NAME DST: unmodified applications through client gateway NAME
# to host DST: ping, an HTTP download (curl) and three 20 MB TCP bulk transfers, to ports
# 5201 (IP packets in DATAGRAM frames), 5202 (TCP carried on QUIC streams) and 5203 (TCP
# relayed over kernel MPTCP), as basic.json's classes say; then OUT/done.
out=$1; bin=$2; name=$3; dst=$4
. "$(dirname "$0")/lib.sh"
trap 'touch "$out/done"' EXIT
date +%s.%N > "$out/work-start"
wait_ready "$name" || { echo "the tunnel did not come up" >&2; exit 1; }
wait_for "$out/www/blob.bin" 10
ping -n -c 20 -i 0.05 -W 2 "$dst" > "$out/ping.txt" 2>&1
# The HTTP server may still be starting: connection refusals are retried.
curl -s -S -m 60 --retry 30 --retry-connrefused --retry-delay 1 -o "$out/got.bin" \
  "http://$dst:8000/blob.bin" 2> "$out/curl.log"; echo $? > "$out/curl.rc"
for port in 5201 5202 5203; do
  "$bin" tcp send --connect "$dst:$port" --bytes 20MB --json > "$out/tcp-send-$port.json" 2> "$out/tcp-send-$port.log"
done
