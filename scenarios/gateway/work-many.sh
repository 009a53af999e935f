#!/bin/sh
# work-many.sh OUT POLYPATH NAME DST N SERVER IFACE...: one of N client gateways (NAME) at
# once: a ping and an HTTP download of DST's blob through its own session; once all N are
# done (OUT/done-*), OUT/done, and each client gateway stops.
out=$1; bin=$2; name=$3; dst=$4; n=$5; server=$6; shift 6
. "$(dirname "$0")/lib.sh"
start_client "$name" "$server" "$@" || { touch "$out/done-$name"; exit 1; }
if wait_ready "$name"; then
  wait_for "$out/www/blob.bin" 30
  ping -n -c 10 -i 0.1 -W 2 "$dst" > "$out/ping-$name.txt" 2>&1
  curl -s -S -m 120 --retry 30 --retry-connrefused --retry-delay 1 -o "$out/got-$name.bin" \
    "http://$dst:8000/blob.bin" 2> "$out/curl-$name.log"; echo $? > "$out/curl-$name.rc"
else
  echo "$name: the tunnel did not come up" >&2
fi
touch "$out/done-$name"
[ "$(ls "$out" | grep -c '^done-')" -ge "$n" ] && touch "$out/done"
wait_done $client_pid
stop_client "$name"
