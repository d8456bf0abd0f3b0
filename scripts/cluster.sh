#!/usr/bin/env bash
# Several hosts on this machine (loopback only), as a deployment that outgrows one host
# runs them: N `spin up` hosts serving the built component (the WASIp3 build with
# SECKILL_BUILD=p3, under a Spin 4) behind HAProxy, and Redis as a
# primary, a replica and a Sentinel, the component's redis_url pointing at a HAProxy TCP
# frontend that follows whichever of the two says `role:master`. MariaDB is the usual
# one (scripts/services.sh). For the multi-host tests (scripts/test-cluster.sh, which
# scripts/test.sh runs) and for trying a failover by hand.
#
#   scripts/cluster.sh up [N]        start N hosts (3 by default) and the rest
#   scripts/cluster.sh down          stop everything it started
#   scripts/cluster.sh kill-host I   kill -9 host I (1..N), as a crash
#   scripts/cluster.sh start-host I  start host I again
#   scripts/cluster.sh env           the addresses, as shell variables
#
# Addresses: the balancer http://127.0.0.1:3180, host I on 3180+I; the benchmark's floor
# component (tests/bench/floor) likewise on as many hosts behind http://127.0.0.1:3190,
# host I on 3190+I, so that a sale through the balancer is held against Spin's floor
# measured through the same balancer; Redis through the
# proxy 127.0.0.1:6480, the primary 6481, the replica 6482, Sentinel 26481 (master name
# `seckill`). The balancer sends each host at most HOST_MAXCONN requests at once (300 by
# default: a few hundred in flight per host, docs/operations.md) and queues the rest; a
# request still queued after QUEUE_TIMEOUT (15 s) is answered 503 with Retry-After: 1. State, logs and
# pids live in target/cluster/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

DIR=target/cluster
BALANCER_PORT=3180
FLOOR_PORT=3190
PROXY_PORT=6480
PRIMARY_PORT=6481
REPLICA_PORT=6482
SENTINEL_PORT=26481
HOST_MAXCONN=${HOST_MAXCONN:-300}
# How long a buyer waits in the balancer's queue before its 503: a queue that moves is
# better than a retry (a retry is another press), so as long as a sale's crowd takes to
# drain at the hosts' pace, and well under a browser's patience.
QUEUE_TIMEOUT=${QUEUE_TIMEOUT:-15s}
# Connections one client address may hold at once. The tests' whole crowd comes from
# 127.0.0.1, so here it is above the crowd; in front of the internet, what one source
# may need (a few hundred; more for addresses behind a carrier's NAT).
SOURCE_MAXCONN=${SOURCE_MAXCONN:-5000}

need() {
  local missing=()
  command -v haproxy >/dev/null || missing+=(haproxy)
  command -v redis-sentinel >/dev/null || missing+=(redis-sentinel)
  command -v curl >/dev/null || missing+=(curl)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "cluster: installing ${missing[*]}"
    apt_install "${missing[@]}"
  fi
}

wait_port() { # wait_port PORT
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "cluster: nothing listens on $1" >&2
  return 1
}

start_redis() { # start_redis PORT [replicaof args]
  local port=$1; shift
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$PWD/$DIR" --daemonize yes --pidfile "$PWD/$DIR/redis-$port.pid" \
    --logfile "$PWD/$DIR/redis-$port.log" "$@"
  wait_port "$port"
}

host_env() {
  # The component's secrets: yours, else the development ones scripts/up.sh made up.
  if [ -z "${SPIN_VARIABLE_JWT_SECRET:-}" ] && [ -f target/dev-secrets.env ]; then
    source target/dev-secrets.env
  fi
  export SPIN_VARIABLE_JWT_SECRET=${SPIN_VARIABLE_JWT_SECRET:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
  export SPIN_VARIABLE_ADMIN_TOKEN=${SPIN_VARIABLE_ADMIN_TOKEN:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
  export SPIN_VARIABLE_REDIS_URL=redis://127.0.0.1:$PROXY_PORT
  export SPIN_VARIABLE_REDIS_ADDRESS=redis://127.0.0.1:$PROXY_PORT
}

start_host() { # start_host I
  local i=$1 port=$((BALANCER_PORT + $1))
  mkdir -p "$DIR/host-$i"
  setsid "$SPIN" up --from "$(build_manifest)" --listen "127.0.0.1:$port" \
    --log-dir "$DIR/host-$i" >"$DIR/host-$i/spin.log" 2>&1 < /dev/null &
  echo $! >"$DIR/host-$i.pid"
  wait_port "$port"
}

start_floor() { # start_floor I
  local i=$1 port=$((FLOOR_PORT + $1))
  mkdir -p "$DIR/floor-$i"
  setsid "$SPIN" up --from tests/bench/floor/spin.toml --listen "127.0.0.1:$port" \
    --log-dir "$DIR/floor-$i" >"$DIR/floor-$i/spin.log" 2>&1 < /dev/null &
  echo $! >"$DIR/floor-$i.pid"
  wait_port "$port"
}

kill_host() { # kill_host I [host|floor]: the whole process group, as a crash
  local pid name=${2:-host}-$1
  pid=$(cat "$DIR/$name.pid" 2>/dev/null) || return 0
  kill -9 -- "-$pid" 2>/dev/null || true
  rm -f "$DIR/$name.pid"
}

http_balancer() { # http_balancer NAME PORT N: a frontend on PORT over N hosts on PORT+1..
  cat <<EOF
frontend $1
  mode http
  bind 127.0.0.1:$2
  # Slow clients stay here, never reaching a host: a head must come whole within 5 s,
  # and a body (up to the API's 16 KiB) is buffered whole before the request is passed
  # on; one source holds at most $SOURCE_MAXCONN connections at once.
  timeout http-request 5s
  option http-buffer-request
  stick-table type ip size 1m expire 1m store conn_cur
  tcp-request connection track-sc0 src
  tcp-request connection reject if { sc0_conn_cur gt $SOURCE_MAXCONN }
  errorfile 408 $PWD/$DIR/408.http
  default_backend $1-hosts
backend $1-hosts
  mode http
  balance leastconn
  # A host killed or restarting is out within a second; its requests in flight fail.
  default-server check inter 500ms fall 2 rise 1 maxconn $HOST_MAXCONN
  errorfile 503 $PWD/$DIR/503.http
EOF
  for i in $(seq 1 "$3"); do
    echo "  server $1-$i 127.0.0.1:$(($2 + i))"
  done
}

balancer_config() { # balancer_config N
  cat <<EOF
global
  # Two descriptors a connection, within the process's limit.
  maxconn $(( ($(ulimit -Hn) - 200) / 2 ))
  # A buffer holds a whole request: a head and the API's largest body (16 KiB).
  tune.bufsize 32768
defaults
  # Every frontend takes the whole crowd (HAProxy's default per frontend is lower than
  # a sale's): the buyers past the hosts' maxconn wait in the backend's queue, and the
  # Redis proxy holds a connection per request in flight on every host.
  maxconn $(( ($(ulimit -Hn) - 200) / 2 ))
  timeout connect 1s
  # An idle keep-alive connection between requests is closed after 10 s.
  timeout http-keep-alive 10s
  timeout client 60s
  timeout server 60s
  timeout queue $QUEUE_TIMEOUT
EOF
  http_balancer shop "$BALANCER_PORT" "$1"
  http_balancer floor "$FLOOR_PORT" "$1"
  cat <<EOF
frontend redis
  mode tcp
  bind 127.0.0.1:$PROXY_PORT
  default_backend redis
backend redis
  mode tcp
  # The primary only: a server that answers role:master. A demoted one is marked down
  # and its sessions cut, so that no client keeps writing to a replica.
  option tcp-check
  tcp-check connect
  tcp-check send PING\r\n
  tcp-check expect string +PONG
  tcp-check send info\ replication\r\n
  tcp-check expect string role:master
  tcp-check send QUIT\r\n
  tcp-check expect string +OK
  default-server check inter 200ms fall 1 rise 2 on-marked-down shutdown-sessions
  server primary 127.0.0.1:$PRIMARY_PORT
  server replica 127.0.0.1:$REPLICA_PORT
EOF
}

up() {
  local n=${1:-3}
  need
  require_spin
  scripts/services.sh
  scripts/migrate.sh
  build_served
  down >/dev/null 2>&1 || true
  mkdir -p "$DIR"
  echo "$n" >"$DIR/hosts"
  printf 'HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{"error":"unavailable","message":"every host is busy; retry"}\n' >"$DIR/503.http"
  printf 'HTTP/1.1 408 Request Time-out\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n{"error":"request_timeout","message":"the request did not arrive in time"}\n' >"$DIR/408.http"

  start_redis $PRIMARY_PORT
  start_redis $REPLICA_PORT --replicaof 127.0.0.1 $PRIMARY_PORT
  cat >"$DIR/sentinel.conf" <<EOF
port $SENTINEL_PORT
bind 127.0.0.1
daemonize yes
pidfile $PWD/$DIR/sentinel.pid
logfile $PWD/$DIR/sentinel.log
dir $PWD/$DIR
sentinel monitor seckill 127.0.0.1 $PRIMARY_PORT 1
sentinel down-after-milliseconds seckill 1000
sentinel failover-timeout seckill 10000
EOF
  redis-sentinel "$DIR/sentinel.conf"
  wait_port $SENTINEL_PORT

  balancer_config "$n" >"$DIR/haproxy.cfg"
  haproxy -D -p "$DIR/haproxy.pid" -f "$DIR/haproxy.cfg"
  wait_port $BALANCER_PORT
  wait_port $PROXY_PORT

  host_env
  for i in $(seq 1 "$n"); do start_host "$i"; start_floor "$i"; done
  # The balancer checks its hosts twice a second: wait until it sends them requests.
  for _ in $(seq 1 50); do
    if curl -fs -o /dev/null "http://127.0.0.1:$BALANCER_PORT/health/live"; then break; fi
    sleep 0.2
  done
  echo "cluster: $n hosts behind http://127.0.0.1:$BALANCER_PORT ($("$SPIN" --version)),"
  echo "  Redis primary $PRIMARY_PORT, replica $REPLICA_PORT, Sentinel $SENTINEL_PORT, through 127.0.0.1:$PROXY_PORT"
}

down() {
  local n
  n=$(cat "$DIR/hosts" 2>/dev/null || echo 0)
  for i in $(seq 1 "$n"); do kill_host "$i"; kill_host "$i" floor; done
  for pidfile in "$DIR/haproxy.pid" "$DIR/sentinel.pid" "$DIR/redis-$PRIMARY_PORT.pid" "$DIR/redis-$REPLICA_PORT.pid"; do
    if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; fi
  done
  echo "cluster: stopped"
}

case "${1:-}" in
  up) up "${2:-3}" ;;
  down) down ;;
  kill-host) kill_host "$2" ;;
  start-host) require_spin; host_env; start_host "$2" ;;
  env)
    echo "CLUSTER_URL=http://127.0.0.1:$BALANCER_PORT CLUSTER_FLOOR_URL=http://127.0.0.1:$FLOOR_PORT"
    echo "CLUSTER_HOSTS=$(cat "$DIR/hosts")"
    echo "CLUSTER_REDIS_PROXY=$PROXY_PORT CLUSTER_REDIS_PRIMARY=$PRIMARY_PORT CLUSTER_REDIS_REPLICA=$REPLICA_PORT CLUSTER_SENTINEL=$SENTINEL_PORT"
    ;;
  *) echo "usage: scripts/cluster.sh up [N] | down | kill-host I | start-host I | env" >&2; exit 2 ;;
esac
