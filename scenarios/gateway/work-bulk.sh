#!/bin/sh
# work-bulk.sh OUT POLYPATH NAME DST SECONDS SERVER IFACE...: client gateway NAME carries a
# bulk TCP transfer of SECONDS to DST:5201; then OUT/done.
out=$1; bin=$2; name=$3; dst=$4; seconds=$5; server=$6; shift 6
. "$(dirname "$0")/lib.sh"
trap 'touch "$out/done"' EXIT
date +%s.%N > "$out/work-start"
start_client "$name" "$server" "$@" || exit 1
wait_ready "$name" || { echo "$name: the tunnel did not come up" >&2; exit 1; }
"$bin" tcp send --connect "$dst:5201" --time "${seconds}s" --json > "$out/tcp-$name.json" 2> "$out/tcp-$name.log"
stop_client "$name"
