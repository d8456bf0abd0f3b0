#!/usr/bin/env bash
# Make sure Redis (127.0.0.1:6379) and MariaDB (127.0.0.1:3306) are installed and running,
# installing them from Debian's packages and starting them when they are not, and that
# libfaketime is installed (the clock test runs a redis-server on it).
# Needs root (or sudo) only when something has to be installed or started.
set -euo pipefail

source "$(dirname "$0")/common.sh"

wait_for() { # wait_for NAME COMMAND...
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "services: $name did not come up" >&2
  return 1
}

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
mariadb_up() { mariadb-admin --protocol=tcp -h 127.0.0.1 -P 3306 -u nobody ping 2>&1 | grep -q -e 'is alive' -e 'Access denied'; }

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "services: installing Redis"
  apt_install redis-server
fi
if ! [ -e "/usr/lib/$(uname -m)-linux-gnu/faketime/libfaketime.so.1" ]; then
  echo "services: installing libfaketime"
  apt_install faketime
fi
if ! redis_up; then
  echo "services: starting Redis"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/seckill.log
  wait_for Redis redis_up
fi

if ! command -v mariadbd >/dev/null && ! [ -x /usr/sbin/mariadbd ]; then
  echo "services: installing MariaDB"
  apt_install mariadb-server mariadb-client
fi
if ! mariadb_up; then
  echo "services: starting MariaDB"
  as_root mkdir -p /run/mysqld
  as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
  as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
  wait_for MariaDB mariadb_up
fi
echo "services: Redis and MariaDB are up"
