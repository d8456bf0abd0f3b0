#!/usr/bin/env bash
# Create the seckill database and its application user, then apply migrations/*.sql in
# order. Every migration is idempotent, so this is safe to run again.
#
# The admin connection defaults to root over the local unix socket (how a fresh Debian
# MariaDB lets root in); set DB_ADMIN_ARGS to use another, e.g. "-h db -uadmin -psecret".
# DB_NAME, DB_USER and DB_PASSWORD must match the mysql_url variable in spin.toml.
# DB_USER_HOST is where the app connects from, as MySQL names hosts: by default the local
# addresses (localhost, 127.0.0.1, ::1); for an app elsewhere (Fermyon Cloud) e.g. '%',
# and then DB_PASSWORD must be given. The user's password is set to DB_PASSWORD every run.
set -euo pipefail
cd "$(dirname "$0")/.."

DB_NAME=${DB_NAME:-seckill}
DB_USER=${DB_USER:-seckill}
DB_USER_HOST=${DB_USER_HOST:-}
if [ -n "$DB_USER_HOST" ] && [ -z "${DB_PASSWORD:-}" ]; then
  echo "migrate: DB_USER_HOST=$DB_USER_HOST lets the app user in from elsewhere: set DB_PASSWORD" >&2
  exit 1
fi
DB_PASSWORD=${DB_PASSWORD:-seckill}
read -r -a hosts <<<"${DB_USER_HOST:-localhost 127.0.0.1 ::1}"
read -r -a admin <<<"${DB_ADMIN_ARGS:--uroot}"
client=$(command -v mariadb || command -v mysql)
as_admin() { if [ -z "${DB_ADMIN_ARGS:-}" ] && [ "$(id -u)" -ne 0 ]; then sudo "$client" "${admin[@]}" "$@"; else "$client" "${admin[@]}" "$@"; fi; }

users=""
for host in "${hosts[@]}"; do
  users+="CREATE USER IF NOT EXISTS '$DB_USER'@'$host' IDENTIFIED BY '$DB_PASSWORD';
ALTER USER '$DB_USER'@'$host' IDENTIFIED BY '$DB_PASSWORD';
GRANT ALL PRIVILEGES ON \`$DB_NAME\`.* TO '$DB_USER'@'$host';
"
done
as_admin <<SQL
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4;
$users
SQL

# One run at a time for a database (scripts/test.sh runs checks side by side, each of
# which migrates): a procedure dropped and made again by two runs at once could be missing
# for a moment, or fail to be made.
mkdir -p target
exec 9>"target/.migrate-$DB_NAME.lock"
flock 9
for migration in migrations/*.sql; do
  as_admin "$DB_NAME" <"$migration"
done
echo "migrate: $DB_NAME is up to date ($(ls migrations/*.sql | wc -l) migrations)"
