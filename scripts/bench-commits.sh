#!/usr/bin/env bash
# Group commits per second with many sales committing at once: whether anything shared
# between vouchers limits them (the feed's places are given by its reads, so no lock is
# shared between vouchers' commits). MySQL alone: no Spin, no Redis. About 2 minutes with
# the defaults. Not part of scripts/test.sh or CI.
#
# Makes a scratch database (seckill_bench_commits) with migrations/*.sql applied and a
# user of its own for it, and drops both at the end, whatever happens. The matrix:
# V vouchers x C connections (each a process calling the group commit over and over on a
# connection it keeps) x B purchases per batch, with the procedure as migrated; see
# scripts/bench_commits.py. Prints a Markdown table.
#
# Settings (environment): T seconds measured per cell (5), WARMUP seconds before that
# (0.5), QUIET_WAIT seconds at most to wait before each cell for the machine to be idle
# (30; cells that shared it anyway are marked BUSY), VOUCHERS ("1 8 64"), CONNS ("1 8 32"), BATCHES ("1 16"), JSON=path for every
# figure as JSON. FLUSH_LOG_AT_TRX_COMMIT=2 sets that server variable for the run (and
# back after it) to take the redo log's fsync out of each commit: the server's, so
# whatever else uses it meanwhile runs without it too. DB_ADMIN_ARGS as for scripts/migrate.sh (default: root over the local
# socket). Installs pymysql (pip, else Debian's python3-pymysql) when missing, and starts
# MariaDB with scripts/services.sh when it is not up.
#   scripts/bench-commits.sh
#   T=2 VOUCHERS="1 64" CONNS="8" BATCHES="16" scripts/bench-commits.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

DB=seckill_bench_commits
BENCH_USER=seckill_bench_commits
BENCH_PASSWORD=bench-$RANDOM$RANDOM
PYTHON=${PYTHON:-python3}

mariadb_up() { mariadb-admin --protocol=tcp -h 127.0.0.1 -P 3306 -u nobody ping 2>&1 | grep -q -e 'is alive' -e 'Access denied'; }
mariadb_up || scripts/services.sh

if ! "$PYTHON" -c 'import pymysql' 2>/dev/null; then
  echo "bench-commits: installing pymysql"
  if ! "$PYTHON" -m pip install -q pymysql 2>/dev/null; then
    apt_install python3-pymysql
    PYTHON=/usr/bin/python3
  fi
fi

read -r -a admin <<<"${DB_ADMIN_ARGS:--uroot}"
client=$(command -v mariadb || command -v mysql)
as_admin() { if [ -z "${DB_ADMIN_ARGS:-}" ] && [ "$(id -u)" -ne 0 ]; then sudo "$client" "${admin[@]}" "$@"; else "$client" "${admin[@]}" "$@"; fi; }

flush_before=
cleanup() {
  if [ -n "$flush_before" ]; then
    as_admin -e "SET GLOBAL innodb_flush_log_at_trx_commit = $flush_before" ||
      echo "bench-commits: could not set innodb_flush_log_at_trx_commit back to $flush_before" >&2
  fi
  as_admin -e "DROP DATABASE IF EXISTS \`$DB\`;
    DROP USER IF EXISTS '$BENCH_USER'@'localhost', '$BENCH_USER'@'127.0.0.1';" ||
    echo "bench-commits: could not drop $DB / $BENCH_USER" >&2
}
trap cleanup EXIT

as_admin <<SQL
DROP DATABASE IF EXISTS \`$DB\`;
CREATE DATABASE \`$DB\` CHARACTER SET utf8mb4;
DROP USER IF EXISTS '$BENCH_USER'@'localhost', '$BENCH_USER'@'127.0.0.1';
CREATE USER '$BENCH_USER'@'localhost' IDENTIFIED BY '$BENCH_PASSWORD';
CREATE USER '$BENCH_USER'@'127.0.0.1' IDENTIFIED BY '$BENCH_PASSWORD';
GRANT ALL PRIVILEGES ON \`$DB\`.* TO '$BENCH_USER'@'localhost';
GRANT ALL PRIVILEGES ON \`$DB\`.* TO '$BENCH_USER'@'127.0.0.1';
SQL
for migration in migrations/*.sql; do
  as_admin "$DB" <"$migration"
done
if [ -n "${FLUSH_LOG_AT_TRX_COMMIT:-}" ]; then
  flush_before=$(as_admin -N -e 'SELECT @@GLOBAL.innodb_flush_log_at_trx_commit')
  as_admin -e "SET GLOBAL innodb_flush_log_at_trx_commit = $FLUSH_LOG_AT_TRX_COMMIT"
fi
echo "bench-commits: $DB made from $(ls migrations/*.sql | wc -l) migrations on" \
  "$(as_admin -N -e 'SELECT VERSION()'), $(nproc) cores," \
  "innodb_flush_log_at_trx_commit=$(as_admin -N -e 'SELECT @@innodb_flush_log_at_trx_commit')"

"$PYTHON" scripts/bench_commits.py --host 127.0.0.1 --port 3306 \
  --user "$BENCH_USER" --password "$BENCH_PASSWORD" --db "$DB" \
  --seconds "${T:-5}" --warmup "${WARMUP:-0.5}" \
  --quiet-wait "${QUIET_WAIT:-30}" --vouchers "${VOUCHERS:-1 8 64}" --conns "${CONNS:-1 8 32}" --batches "${BATCHES:-1 16}" \
  ${JSON:+--json "$JSON"}
