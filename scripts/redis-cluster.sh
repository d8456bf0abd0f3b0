#!/usr/bin/env bash
# A real Redis Cluster on this machine (loopback only): six redis-server processes in
# cluster mode, three primaries with one replica each, made by `redis-cli --cluster
# create`. For trying the component against a sharded Redis: a slot moving under it
# (`migrate`) and a primary crashing and its replica taking over (`kill`, `wait-ok`).
#
#   scripts/redis-cluster.sh up                 start from scratch, wait until it serves
#   scripts/redis-cluster.sh down               stop all six (their dirs stay)
#   scripts/redis-cluster.sh env                the addresses, as shell variables
#   scripts/redis-cluster.sh kill PORT          kill -9 that node, as a crash
#   scripts/redis-cluster.sh start PORT         start it again and wait until it is in sync
#                                               (a replica if it was failed over meanwhile)
#   scripts/redis-cluster.sh primaries          the live primaries' ports, one a line
#   scripts/redis-cluster.sh wait-ok            wait until every slot is served again
#   scripts/redis-cluster.sh migrate SLOT PORT  move a slot (and its keys) to that primary
#
# Ports REDIS_CLUSTER_BASE+1..+6 (7101..7106 by default); redis-cli picks which replica
# follows which primary. A node is out after REDIS_CLUSTER_NODE_TIMEOUT ms (1000): a
# primary's crash is over (its replica serving) 2.5 to 3 s later. `migrate` moves
# MIGRATE_BATCH keys (100) at a time and sleeps MIGRATE_PAUSE_MS (0) between batches, to
# hold a slot mid-migration for a test.
# Each node's nodes.conf, log and pid live in target/redis-cluster/PORT/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

DIR=target/redis-cluster
BASE=${REDIS_CLUSTER_BASE:-7100}
PORTS=($((BASE + 1)) $((BASE + 2)) $((BASE + 3)) $((BASE + 4)) $((BASE + 5)) $((BASE + 6)))
NODE_TIMEOUT=${REDIS_CLUSTER_NODE_TIMEOUT:-1000}

need() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then return; fi
  echo "redis-cluster: installing redis-server redis-tools"; apt_install redis-server redis-tools
}

rcli() { local port=$1; shift; redis-cli -h 127.0.0.1 -p "$port" "$@"; }
alive() { [ "$(rcli "$1" PING 2>/dev/null)" = PONG ]; }
live_ports() { for p in "${PORTS[@]}"; do if alive "$p"; then echo "$p"; fi; done; }

start_node() { # start_node PORT: with its dir as it is (its nodes.conf is who it was)
  local port=$1 dir=$PWD/$DIR/$1
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --appendonly no --save '' \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout "$NODE_TIMEOUT" \
    --cluster-replica-validity-factor 0 --cluster-allow-replica-migration no \
    --repl-diskless-sync-delay 0
  # 0: a replica however long cut off from its primary may still take over (a test's
  # crash must end in a failover); no migration: each primary keeps its one replica. No
  # delay: by default a primary waits 5 s before a replica's first sync, and a primary
  # killed meanwhile hands its slots to a replica with none of their keys.
  for _ in $(seq 1 100); do if alive "$port"; then return 0; fi; sleep 0.1; done
  echo "redis-cluster: node $port did not start (see $DIR/$port/redis.log)" >&2
  return 1
}

# running PID: alive and not a zombie. A daemonized node's parent is init, which may reap
# it seconds after it exited (seen here: about 1.5 s a node).
running() { kill -0 "$1" 2>/dev/null && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

stop_node() { # stop_node PORT [-9]
  local port=$1 pidfile=$DIR/$1/redis.pid pid=
  pid=$(cat "$pidfile" 2>/dev/null) || true
  # Only a pid that is still a redis-server: a stale file's pid may be anyone's now.
  if [ -n "$pid" ] && ! grep -qa redis-server "/proc/$pid/cmdline" 2>/dev/null; then pid=; fi
  if [ "${2:-}" != -9 ]; then
    # NOW: a primary does not wait for its replicas to catch up (shutdown-timeout, 10 s).
    rcli "$port" SHUTDOWN NOSAVE NOW >/dev/null 2>&1 || true
    for _ in $(seq 1 30); do [ -n "$pid" ] && running "$pid" || break; sleep 0.1; done
  fi
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$pidfile"
  [ -n "$pid" ]
}

# ready_view PORT: whether that node's CLUSTER NODES shows 3 primaries owning slots and 3
# replicas connected, none failing.
ready_view() {
  rcli "$1" CLUSTER NODES 2>/dev/null | awk '
    $3 ~ /fail|handshake|noaddr/ { next }
    $3 ~ /master/ && NF > 8 { m++ }
    $3 ~ /slave/ && $8 == "connected" { s++ }
    END { exit !(m == 3 && s == 3) }'
}

# covered PORT: whether in that node's view every slot belongs to a primary not failing
# and alive: just after a crash no node has flagged the dead one yet.
covered() {
  rcli "$1" CLUSTER NODES 2>/dev/null | awk -v live="$LIVE" '
    { split($2, a, "[:@]") }
    $3 !~ /master/ || $3 ~ /fail/ || index(live, " " a[2] " ") == 0 { next }
    { for (i = 9; i <= NF; i++) {
        if ($i ~ /^\[/) continue   # [slot->-id] / [slot-<-id]: a migration, not ownership
        n = split($i, r, "-"); n_slots += (n == 2 ? r[2] - r[1] + 1 : 1) } }
    END { exit !(n_slots == 16384) }'
}

# must PORT COMMAND...: a command that answers OK (redis-cli exits 0 on an error reply).
must() {
  local port=$1 out; shift
  out=$(rcli "$port" "$@" 2>&1)
  if [ "$out" != OK ]; then echo "redis-cluster: $port $*: $out" >&2; exit 1; fi
}

state_ok() { rcli "$1" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok'; }
# settled PORT: a replica holding its primary's data in full, or a primary serving (a
# primary back from a crash says cluster_state:fail for 2 s, in which the cluster tells
# it whether it has been replaced).
settled() {
  if [ "$(rcli "$1" ROLE 2>/dev/null | head -n1)" = master ]; then state_ok "$1"
  else rcli "$1" INFO replication 2>/dev/null | grep -q '^master_link_status:up'; fi
}
ready() { ready_view "$1" && settled "$1"; }
now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }

wait_for() { # wait_for WHAT CHECK: CHECK on every live node, polled for up to 30 s
  local start p ok
  start=$(now_ms)
  while [ $(($(now_ms) - start)) -lt 30000 ]; do
    ok=1 LIVE=" $(live_ports | tr '\n' ' ')"  # once a round: a node that died is out
    for p in $LIVE; do
      if ! state_ok "$p" || ! "$2" "$p"; then ok=; break; fi
    done
    if [ -n "$ok" ] && [ -n "${LIVE// /}" ]; then
      echo "redis-cluster: $1 after $(($(now_ms) - start)) ms"; return 0
    fi
    sleep 0.2
  done
  echo "redis-cluster: not $1 within 30 s; the live nodes' views:" >&2
  for p in $(live_ports); do echo "--- $p" >&2; rcli "$p" CLUSTER NODES >&2 || true; done
  return 1
}

up() {
  need
  down >/dev/null
  rm -rf "$DIR"
  for p in "${PORTS[@]}"; do start_node "$p"; done
  # Primaries first, then the replicas: with --cluster-replicas 1 redis-cli takes the
  # first three as primaries and pairs the rest with them as it sees fit.
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${PORTS[@]}") \
    --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 \
    || { cat "$DIR/create.log" >&2; echo "redis-cluster: create failed" >&2; exit 1; }
  wait_for "ready (3 primaries, 3 replicas in sync)" ready
  echo "redis-cluster: seeds $(printf '127.0.0.1:%s ' "${PORTS[@]}")"
}

down() {
  for p in "${PORTS[@]}"; do stop_node "$p" || true; done
  echo "redis-cluster: stopped"
}

primaries() { # as flagged, less any that is dead but not yet flagged so
  local live seed; live=" $(live_ports | tr '\n' ' ')"; seed=${live# }; seed=${seed%% *}
  if [ -z "$seed" ]; then echo "redis-cluster: no node answers on ${PORTS[*]}" >&2; exit 1; fi
  rcli "$seed" CLUSTER NODES | awk -v live="$live" '$3 ~ /master/ && $3 !~ /fail/ {
    split($2, a, "[:@]"); if (index(live, " " a[2] " ")) print a[2] }' | sort -n
}

migrate() { # migrate SLOT TO_PORT
  local slot=$1 to=$2 batch=${MIGRATE_BATCH:-100} pause=${MIGRATE_PAUSE_MS:-0}
  local nodes to_id from_id from moved=0 keys p out
  if ! alive "$to"; then echo "redis-cluster: nothing answers on $to" >&2; exit 1; fi
  nodes=$(rcli "$to" CLUSTER NODES)
  to_id=$(awk '$3 ~ /myself/ && $3 ~ /master/ { print $1 }' <<<"$nodes")
  if [ -z "$to_id" ]; then echo "redis-cluster: $to is not a primary" >&2; exit 1; fi
  # The owner: the primary whose ranges hold the slot.
  from_id=$(awk -v s="$slot" '$3 ~ /master/ && $3 !~ /fail/ { for (i = 9; i <= NF; i++) {
    if ($i ~ /^\[/) continue; n = split($i, r, "-"); if (n == 1) r[2] = r[1]
    if (s >= r[1] && s <= r[2]) { print $1; exit } } }' <<<"$nodes")
  if [ -z "$from_id" ]; then echo "redis-cluster: no primary owns slot $slot" >&2; exit 1; fi
  if [ "$from_id" = "$to_id" ]; then echo "redis-cluster: slot $slot is already on $to"; return 0; fi
  from=$(awk -v id="$from_id" '$1 == id { split($2, a, "[:@]"); print a[2] }' <<<"$nodes")
  must "$to" CLUSTER SETSLOT "$slot" IMPORTING "$from_id"
  must "$from" CLUSTER SETSLOT "$slot" MIGRATING "$to_id"
  while :; do
    # An empty answer reads as one empty line: no key is "" here (that one is slot 0's).
    mapfile -t keys < <(rcli "$from" CLUSTER GETKEYSINSLOT "$slot" "$batch" | sed '/^$/d')
    if [ ${#keys[@]} -eq 0 ]; then break; fi
    out=$(rcli "$from" MIGRATE 127.0.0.1 "$to" "" 0 5000 KEYS "${keys[@]}")
    case "$out" in OK|NOKEY) ;; *) echo "redis-cluster: MIGRATE: $out" >&2; exit 1 ;; esac
    moved=$((moved + ${#keys[@]}))
    if [ "$pause" -gt 0 ]; then sleep "$(awk -v ms="$pause" 'BEGIN { print ms / 1000 }')"; fi
  done
  # Target first, so that no node sends a client back and forth between the two; then
  # the source, then every other primary (the replicas learn by gossip).
  must "$to" CLUSTER SETSLOT "$slot" NODE "$to_id"
  must "$from" CLUSTER SETSLOT "$slot" NODE "$to_id"
  for p in $(awk '$3 ~ /master/ && $3 !~ /fail/ { split($2, a, "[:@]"); print a[2] }' <<<"$nodes"); do
    if [ "$p" != "$to" ] && [ "$p" != "$from" ]; then must "$p" CLUSTER SETSLOT "$slot" NODE "$to_id"; fi
  done
  echo "redis-cluster: slot $slot moved from $from to $to, $moved keys"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env)
    echo "REDIS_CLUSTER_NODES=$(printf 'redis://127.0.0.1:%s\n' "${PORTS[@]}" | paste -sd,)"
    echo "REDIS_CLUSTER_ADDRESS='redis://127.0.0.1:*'"
    ;;
  kill) stop_node "$2" -9 || { echo "redis-cluster: no node of ours runs on $2" >&2; exit 1; } ;;
  start)
    need; start_node "$2"
    for _ in $(seq 1 150); do if settled "$2"; then echo "redis-cluster: $2 back, $(rcli "$2" ROLE | head -n1)"; exit 0; fi; sleep 0.2; done
    echo "redis-cluster: $2 runs but has not settled in 30 s (see $DIR/$2/redis.log)" >&2; exit 1 ;;
  primaries) primaries ;;
  wait-ok) wait_for "ok (every slot served)" covered ;;
  migrate) migrate "$2" "$3" ;;
  *) echo "usage: scripts/redis-cluster.sh up | down | env | kill PORT | start PORT | primaries | wait-ok | migrate SLOT PORT" >&2; exit 2 ;;
esac
