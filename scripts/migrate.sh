#!/usr/bin/env bash
# Create the seckill database and its application user, then apply migrations/*.sql in
# order. Every migration is idempotent, so this is safe to run again.
#
# The admin connection defaults to root over the local unix socket (how a fresh Debian
# MariaDB lets root in); set DB_ADMIN_ARGS to use another, e.g. "-h db -uadmin -psecret".
# DB_NAME, DB_USER and DB_PASSWORD must match the mysql_url variable in spin.toml.
set -euo pipefail
cd "$(dirname "$0")/.."

DB_NAME=${DB_NAME:-seckill}
DB_USER=${DB_USER:-seckill}
DB_PASSWORD=${DB_PASSWORD:-seckill}
read -r -a admin <<<"${DB_ADMIN_ARGS:--uroot}"
client=$(command -v mariadb || command -v mysql)
as_admin() { if [ -z "${DB_ADMIN_ARGS:-}" ] && [ "$(id -u)" -ne 0 ]; then sudo "$client" "${admin[@]}" "$@"; else "$client" "${admin[@]}" "$@"; fi; }

as_admin <<SQL
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
CREATE USER IF NOT EXISTS '$DB_USER'@'::1' IDENTIFIED BY '$DB_PASSWORD';
GRANT ALL PRIVILEGES ON \`$DB_NAME\`.* TO '$DB_USER'@'localhost', '$DB_USER'@'127.0.0.1', '$DB_USER'@'::1';
SQL

for migration in migrations/*.sql; do
  as_admin "$DB_NAME" <"$migration"
done
echo "migrate: $DB_NAME is up to date ($(ls migrations/*.sql | wc -l) migrations)"
