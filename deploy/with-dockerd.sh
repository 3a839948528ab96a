#!/usr/bin/env bash
# Run a command with a Docker engine: the one that runs already, else a dockerd started here (with
# --iptables=false: containers reach each other on their user-defined network, builds use the host's) and
# stopped when the command ends. A daemon this script did not start is never stopped.
#   deploy/with-dockerd.sh COMMAND [ARGS...]
set -uo pipefail
if docker info >/dev/null 2>&1; then
  exec "$@"
fi
command -v docker >/dev/null || { echo "no docker client: apt-get install docker.io"; exit 1; }
command -v dockerd >/dev/null || { echo "no Docker engine runs and none is installed: apt-get install docker.io"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "no Docker engine runs, and starting dockerd needs root"; exit 1; }
log=$(mktemp /tmp/storetune-dockerd.XXXXXX.log)
dockerd --iptables=false >"$log" 2>&1 &
pid=$!
stop() { kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -f "$log"; }
trap stop EXIT
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "dockerd could not start: $(grep -m1 -iE 'level=(fatal|error)' "$log" | sed 's/.*msg="\([^"]*\)".*/\1/' || tail -1 "$log")"
    exit 1
  fi
  sleep 1
done
docker info >/dev/null 2>&1 || { echo "dockerd did not answer within 60 s: $(tail -1 "$log")"; exit 1; }
echo "started dockerd (pid $pid) for this run; it stops when the run ends"
"$@"
