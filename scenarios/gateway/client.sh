#!/bin/sh
# client.sh OUT POLYPATH NAME SERVER_ADDR IFACE... : client gateway NAME (token NAME-token,
# the server's certificate pinned) with one --interface per IFACE, until OUT/done.
out=$1; bin=$2; name=$3; server=$4; shift 4
. "$(dirname "$0")/lib.sh"
start_client "$name" "$server" "$@" || exit 1
wait_done $client_pid
stop_client "$name"
