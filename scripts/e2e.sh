# Shared by scripts/test-browser.sh and scripts/test-contract.sh (sourced, not run): a
# Python venv under target/, the backends, and the built application served by Spin on a
# free loopback port with fresh development secrets; what it starts stops when the
# script exits.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
E2E_DIR=$ROOT/target/e2e
mkdir -p "$E2E_DIR"

source "$ROOT/scripts/common.sh"

# python_venv NAME PACKAGE==VERSION...: a venv at target/e2e/NAME with exactly these
# packages; prints nothing, leaves $VENV set.
python_venv() {
  local name=$1; shift
  VENV=$E2E_DIR/$name
  if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    echo "e2e: installing python3-venv"
    apt_install python3 python3-venv
  fi
  local stamp="$VENV/.installed"
  if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$*" ]; then
    echo "e2e: installing $* into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$@"
    echo "$*" >"$stamp"
  fi
}

# What each check needs installed, in functions so that scripts/test.sh can install it
# ahead, while its builds take the cores.
contract_tools() { python_venv contract schemathesis==4.32.5; }
browser_tools() {
  if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
    echo "browser: installing chromium and chromium-driver"
    apt_install chromium chromium-driver
  fi
  python_venv browser selenium==4.51.0
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
random_secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# Processes this script started, stopped when it exits.
E2E_PIDS=()
# Spin runs in a process group of its own (`spin up` serves from a child process), so the
# whole group is stopped.
trap 'for pid in "${E2E_PIDS[@]}"; do kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done' EXIT

# setup: the backends up, the migrations applied, the components built, and openssl for
# scripts/token.sh.

setup() {
  if ! command -v openssl >/dev/null; then apt_install openssl; fi
  "$ROOT/scripts/services.sh"
  "$ROOT/scripts/migrate.sh"
  build_served
}

# private_backends NAME: a redis-server of this run's own and a fresh database seckill_NAME
# on the MariaDB, so that the run sees only the data it makes. (The shared ones hold
# other tests' vouchers, some with no Redis state, which a purchase rightly answers 503.)
private_backends() {
  local db=seckill_$1 port dir
  port=$(free_port)
  dir=$(mktemp -d "$E2E_DIR/$1.XXXXXX")
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir" --logfile redis.log >/dev/null &
  E2E_PIDS+=($!)
  # migrate.sh made the application user the database's owner, so it may drop it.
  "$(command -v mariadb || command -v mysql)" -h 127.0.0.1 -useckill -pseckill \
    -e "DROP DATABASE IF EXISTS \`$db\`" 2>/dev/null || true
  DB_NAME=$db "$ROOT/scripts/migrate.sh"
  export SPIN_VARIABLE_REDIS_URL=redis://127.0.0.1:$port
  export SPIN_VARIABLE_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:3306/$db
  # The build's manifest (spin-p3.toml when SECKILL_BUILD=p3) with absolute sources and
  # this Redis among the outbound hosts.
  MANIFEST=$dir/spin.toml
  sed -e "s|^source = \"|source = \"$ROOT/|" -e "s|redis://127.0.0.1:6379|redis://127.0.0.1:$port|" \
    "$ROOT/$(build_manifest)" >"$MANIFEST"
  for _ in $(seq 1 50); do
    if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then return 0; fi
    sleep 0.1
  done
  echo "e2e: the private redis-server did not start" >&2
  exit 1
}

# serve: `spin up` of $MANIFEST (spin.toml by default) on $PORT (a free one when unset),
# with fresh secrets and the environment's SPIN_VARIABLE_* settings. Sets BASE and exports
# the secrets.
serve() {
  require_spin
  export SPIN_VARIABLE_JWT_SECRET=${SPIN_VARIABLE_JWT_SECRET:-$(random_secret)}
  export SPIN_VARIABLE_ADMIN_TOKEN=${SPIN_VARIABLE_ADMIN_TOKEN:-$(random_secret)}
  local logs pid
  PORT=${PORT:-$(free_port)}
  logs=$(mktemp -d "$E2E_DIR/spin.XXXXXX")
  BASE=http://127.0.0.1:$PORT
  setsid "$SPIN" up --listen "127.0.0.1:$PORT" --from "${MANIFEST:-$ROOT/$(build_manifest)}" \
    --log-dir "$logs" --state-dir "$logs" >"$logs/spin.out" 2>&1 &
  pid=$!
  E2E_PIDS+=($pid)
  for _ in $(seq 1 300); do
    if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "$BASE/health" 2>/dev/null; then
      echo "e2e: serving with $("$SPIN" --version) at $BASE (logs in $logs)"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.2
  done
  echo "e2e: Spin did not serve $BASE:" >&2
  cat "$logs/spin.out" >&2
  exit 1
}
