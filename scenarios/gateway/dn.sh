#!/bin/sh
# dn.sh OUT POLYPATH ADDR [tcp | tcp-all] [udp PORT EXPECT]...: the destination network's
# host: an HTTP server (python3 -m http.server) serving OUT/www/blob.bin (5 MB of random
# bytes); with `tcp` a `polypath tcp recv --once` on each of ADDR:5201, 5202 and 5203
# (reports in tcp-recv-PORT.json),
# with `tcp-all` one for every connection until the end (one report per line, intervals of
# $TCP_INTERVAL, default 1s); with
# `udp PORT N` a `polypath udp recv` on ADDR:PORT expecting N packets (udp-PORT.json);
# until OUT/done.
out=$1; bin=$2; addr=$3; shift 3
. "$(dirname "$0")/lib.sh"
mkdir -p "$out/www"
head -c 5000000 /dev/urandom > "$out/www/blob.tmp" && mv "$out/www/blob.tmp" "$out/www/blob.bin"
python3 -m http.server 8000 --bind "$addr" --directory "$out/www" > "$out/http.log" 2>&1 &
http=$!
while [ $# -gt 0 ]; do
  case $1 in
    tcp) for port in 5201 5202 5203; do
           "$bin" tcp recv --listen "$addr:$port" --once --json > "$out/tcp-recv-$port.json" 2> "$out/tcp-recv-$port.log" &
         done ;;
    tcp-all) "$bin" tcp recv --listen "$addr:5201" --interval "${TCP_INTERVAL:-1s}" --json > "$out/tcp-recv.json" 2> "$out/tcp-recv.log" &
             tcp_all=$! ;;
    udp) "$bin" udp recv --listen "$addr:$2" --expect "$3" > "$out/udp-$2.json" 2> "$out/udp-$2.log" &
         shift 2 ;;
  esac
  shift
done
wait_done $http
stop $http
[ -n "$tcp_all" ] && stop $tcp_all
wait
# What matters here is what the tools wrote.
exit 0
