#!/usr/bin/env bash
# From a fresh machine to a running service: start (installing if needed) Redis and
# MariaDB, apply the migrations, build the component, and serve it on
# http://127.0.0.1:3000 with `spin up` (Spin from $SPIN, else `spin` on PATH).
#
# Secrets come from SPIN_VARIABLE_JWT_SECRET and SPIN_VARIABLE_ADMIN_TOKEN; when unset,
# random development secrets are made up and printed.
set -euo pipefail
cd "$(dirname "$0")/.."
LISTEN=${LISTEN:-127.0.0.1:3000}

source scripts/common.sh
require_spin
scripts/services.sh
scripts/migrate.sh
scripts/build.sh

random_secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
if [ -z "${SPIN_VARIABLE_JWT_SECRET:-}" ]; then
  export SPIN_VARIABLE_JWT_SECRET=$(random_secret)
  echo "up: development jwt_secret:  $SPIN_VARIABLE_JWT_SECRET"
fi
if [ -z "${SPIN_VARIABLE_ADMIN_TOKEN:-}" ]; then
  export SPIN_VARIABLE_ADMIN_TOKEN=$(random_secret)
  echo "up: development admin_token: $SPIN_VARIABLE_ADMIN_TOKEN"
fi

echo "up: serving with $("$SPIN" --version)"
echo "up: sale page: http://$LISTEN/shop/vouchers/<voucher id> (a buyer token: SPIN_VARIABLE_JWT_SECRET=... scripts/token.sh <user id>)"
exec "$SPIN" up --listen "$LISTEN"
