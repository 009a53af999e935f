#!/bin/sh
# dn.sh OUT POLYPATH ADDR [tcp] [udp EXPECT]: the destination network's host: an HTTP server
# (python3 -m http.server) serving OUT/www/blob.bin (5 MB of random bytes), and with `tcp` a
# `polypath tcp recv` on ADDR:5201, with `udp N` a `polypath udp recv` on ADDR:6000
# expecting N packets; until OUT/done.
out=$1; bin=$2; addr=$3; shift 3
. "$(dirname "$0")/lib.sh"
mkdir -p "$out/www"
head -c 5000000 /dev/urandom > "$out/www/blob.tmp" && mv "$out/www/blob.tmp" "$out/www/blob.bin"
python3 -m http.server 8000 --bind "$addr" --directory "$out/www" > "$out/http.log" 2>&1 &
http=$!
while [ $# -gt 0 ]; do
  case $1 in
    tcp) "$bin" tcp recv --listen "$addr:5201" --once --json > "$out/tcp-recv.json" 2> "$out/tcp-recv.log" & ;;
    udp) "$bin" udp recv --listen "$addr:6000" --expect "$2" > "$out/udp-recv.json" 2> "$out/udp-recv.log" & shift ;;
  esac
  shift
done
wait_done $http
stop $http
wait
# What matters here is what the tools wrote.
exit 0
