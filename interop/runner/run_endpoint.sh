#!/bin/bash
# polypath as an endpoint of the QUIC Interop Runner
# (https://github.com/quic-interop/quic-interop-runner): the runner starts this script in
# the endpoint container with
#   ROLE          client or server
#   TESTCASE      the test case; a case polypath does not support exits with status 127
#   REQUESTS      (client) the URLs to download, separated by spaces
#   SSLKEYLOGFILE TLS secrets are appended there (polypath reads it itself)
#   QLOGDIR       one qlog file (.sqlog) per connection goes there
# and the directories /www (the server's files), /downloads (where the client saves them)
# and /certs (cert.pem, priv.key: the server's certificate chain and key), port 443.
#
# Outside the runner (the local harness of polypath-interop, on loopback) these may be
# overridden: WWW_DIR, DOWNLOADS_DIR, CERTS_DIR, PORT, LISTEN (the server's address,
# default [::]:PORT), POLYPATH (the binary), SETUP (the container's network set-up script;
# empty to skip), WAIT_FOR (the runner's simulator to wait for; empty to skip) and
# PREFERRED_ADDRESS (the server's preferred address in connectionmigration).
set -eu

POLYPATH=${POLYPATH:-/usr/local/bin/polypath}
WWW_DIR=${WWW_DIR:-/www}
DOWNLOADS_DIR=${DOWNLOADS_DIR:-/downloads}
CERTS_DIR=${CERTS_DIR:-/certs}
PORT=${PORT:-443}
LISTEN=${LISTEN:-[::]:$PORT}
SETUP=${SETUP-/setup.sh}
WAIT_FOR=${WAIT_FOR-sim:57832}
ROLE=${ROLE:-}
TESTCASE=${TESTCASE:-}

# The options each role adds for the test case; unsupported cases end here with 127.
client_opts=()
server_opts=()
case "$TESTCASE" in
  # ECN (RFC 9000 section 13.4) is on by default: every path marks once validated.
  handshake | transfer | multiplexing | ipv6 | ecn) ;;
  # NAT rebinding is the network's doing (the runner's simulator, or the harness's NAT):
  # the server follows the client's new address, validating it (RFC 9000 section 9.3).
  rebind-port | rebind-addr) ;;
  # The server's preferred address (RFC 9000 section 9.6): the server advertises it and
  # listens there too; the client (by default) validates it once the handshake is
  # confirmed and moves its connection there. The runner names no preferred address; as
  # other endpoints do, the server takes its own IPv4 address in the runner's network
  # (server4) on port 4433, unless PREFERRED_ADDRESS gives one. (Runner versions that
  # start the server of this case with TESTCASE=transfer, the client alone getting
  # connectionmigration, get no preferred address from this server.)
  connectionmigration)
    if [ "$ROLE" = server ] && [ -z "${PREFERRED_ADDRESS:-}" ]; then
      server4=$(getent ahostsv4 server4 | awk 'NR == 1 { print $1 }') || server4=
      if [ -z "$server4" ]; then
        echo "connectionmigration: cannot resolve server4; set PREFERRED_ADDRESS" >&2
        exit 1
      fi
      PREFERRED_ADDRESS="$server4:4433"
    fi
    if [ "$ROLE" = server ]; then
      server_opts+=(--preferred-address "$PREFERRED_ADDRESS")
    fi
    ;;
  retry) server_opts+=(--retry) ;;
  chacha20)
    client_opts+=(--cipher chacha20)
    server_opts+=(--cipher chacha20)
    ;;
  keyupdate) client_opts+=(--key-update 10) ;;
  # QUIC v2 (RFC 9369) by compatible version negotiation (RFC 9368): the client starts in
  # v1 and offers v2, the server prefers v2 and switches.
  v2)
    client_opts+=(--quic-version "v1,v2")
    server_opts+=(--quic-version "v2,v1")
    ;;
  # Two connections, the second resuming the first's session (the server sends a session
  # ticket on every hq-interop connection).
  resumption) client_opts+=(--resume) ;;
  # The same, the second connection's requests in 0-RTT; the server's tickets allow it.
  zerortt)
    client_opts+=(--zero-rtt)
    server_opts+=(--zero-rtt)
    ;;
  # The multipath proposal (interop/MULTIPATH-CASES.md): the client offers multipath; a
  # second path comes from the client's second address (SECOND_LOCAL here, the runner
  # network's second client interface in a multipath-capable runner).
  multipath-handshake) client_opts+=(--multipath) ;;
  multipath-transfer | multipath-abandon | multipath-backup)
    if [ -z "${SECOND_LOCAL:-}" ] || [ -z "${FIRST_LOCAL:-}" ]; then
      echo "$TESTCASE needs FIRST_LOCAL and SECOND_LOCAL (the client's two addresses)" >&2
      exit 127
    fi
    client_opts+=(--local "$FIRST_LOCAL" --local "$SECOND_LOCAL")
    case "$TESTCASE" in
      # Round robin on both sides, so that both paths carry data whatever their RTTs.
      multipath-transfer)
        client_opts+=(--scheduler rr)
        server_opts+=(--scheduler rr)
        ;;
      # Path 1 abandoned once it has received 8 kB (it carries data: it is in use), in the
      # middle of the download.
      multipath-abandon)
        client_opts+=(--scheduler rr --abandon-path 1@8kB)
        server_opts+=(--scheduler rr)
        ;;
      # The second path opened as a backup (PATH_STATUS_BACKUP); the server's default
      # scheduler keeps data off it while path 0 works.
      multipath-backup) client_opts+=(--path-manager backup) ;;
    esac
    ;;
  *)
    echo "test case ${TESTCASE:-(none)} is not supported" >&2
    exit 127
    ;;
esac

if [ -n "$SETUP" ] && [ -x "$SETUP" ]; then
  "$SETUP"
fi

qlog_opts=()
if [ -n "${QLOGDIR:-}" ]; then
  qlog_opts+=(--qlog "$QLOGDIR")
fi

case "$ROLE" in
  client)
    if [ -n "$WAIT_FOR" ] && [ -x /wait-for-it.sh ]; then
      /wait-for-it.sh "$WAIT_FOR" -s -t 30
    fi
    url_opts=()
    read -r -a urls <<< "${REQUESTS:-}"
    for url in "${urls[@]}"; do
      url_opts+=(--url "$url")
    done
    if [ "${#url_opts[@]}" -eq 0 ]; then
      echo "REQUESTS names no URL" >&2
      exit 1
    fi
    mkdir -p "$DOWNLOADS_DIR"
    exec "$POLYPATH" client --insecure --alpn hq-interop --downloads "$DOWNLOADS_DIR" \
      "${url_opts[@]}" "${client_opts[@]}" "${qlog_opts[@]}"
    ;;
  server)
    exec "$POLYPATH" server --listen "$LISTEN" \
      --cert "$CERTS_DIR/cert.pem" --key "$CERTS_DIR/priv.key" \
      --www "$WWW_DIR" --alpn hq-interop "${server_opts[@]}" "${qlog_opts[@]}"
    ;;
  *)
    echo "ROLE must be client or server, not ${ROLE:-(unset)}" >&2
    exit 1
    ;;
esac
