#!/usr/bin/env bash
# From a fresh machine to a running service: start (installing if needed) Redis and
# MariaDB, apply the migrations, build the component, and serve it on
# http://127.0.0.1:3000 with `spin up` (Spin from $SPIN, else `spin` on PATH).
#
#   scripts/up.sh          the default build (spin.toml): every Spin, Fermyon Cloud
#   scripts/up.sh --p3     the WASIp3 build (spin-p3.toml) under Spin 4.0.x ($SPIN4, else
#                          `spin4` or `spin` on PATH, which must then be 4.0)
#
# Secrets come from SPIN_VARIABLE_JWT_SECRET and SPIN_VARIABLE_ADMIN_TOKEN. For one that is
# unset it makes up a development secret (or takes the one it made up last time), prints
# it and saves it as an `export` line in target/dev-secrets.env (mode 600, ignored by git),
# where scripts/token.sh and the README's snippets find it. A secret you supplied is
# neither printed nor saved. A jwt_secret shorter than 32 bytes is refused here, as the
# component refuses it. Buyer tokens must name an issuer and an audience:
# SPIN_VARIABLE_JWT_ISSUER and SPIN_VARIABLE_JWT_AUDIENCE, by default seckill-dev and
# seckill (saved beside the secrets, for scripts/token.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
LISTEN=${LISTEN:-127.0.0.1:3000}

MANIFEST=spin.toml
source scripts/common.sh
if [ "${1:-}" = --p3 ]; then
  MANIFEST=spin-p3.toml
  SPIN=${SPIN4:-$(command -v spin4 || command -v spin || true)}
fi
require_spin
scripts/services.sh
scripts/migrate.sh
scripts/build.sh

random_secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
DEV_SECRETS=target/dev-secrets.env
made_up=()
for name in SPIN_VARIABLE_JWT_SECRET SPIN_VARIABLE_ADMIN_TOKEN; do
  # Last time's, so that a restart keeps the tokens minted against it; only a value this
  # script could have written, as the file is sourced.
  saved=$(sed -n "s/^export $name=\([0-9a-f]\{64\}\)\$/\1/p" "$DEV_SECRETS" 2>/dev/null || true)
  # Yours, unless it is the one sourced from the file.
  if [ -n "${!name:-}" ] && [ "${!name}" != "$saved" ]; then continue; fi
  export "$name=${saved:-$(random_secret)}"
  made_up+=("export $name=${!name}")
done
if [ "${#SPIN_VARIABLE_JWT_SECRET}" -lt 32 ]; then
  echo "up: SPIN_VARIABLE_JWT_SECRET must be at least 32 bytes (e.g. openssl rand -hex 32)" >&2
  exit 1
fi
# A token the login signs for another service is no buyer token here.
export SPIN_VARIABLE_JWT_ISSUER=${SPIN_VARIABLE_JWT_ISSUER-seckill-dev}
export SPIN_VARIABLE_JWT_AUDIENCE=${SPIN_VARIABLE_JWT_AUDIENCE-seckill}
echo "up: buyer tokens must carry iss \"$SPIN_VARIABLE_JWT_ISSUER\" and aud \"$SPIN_VARIABLE_JWT_AUDIENCE\""
# Rewritten every start, so that it never holds a secret the service no longer uses.
rm -f "$DEV_SECRETS"
if [ ${#made_up[@]} -gt 0 ]; then
  made_up+=("export SPIN_VARIABLE_JWT_ISSUER=$(printf %q "$SPIN_VARIABLE_JWT_ISSUER")"
    "export SPIN_VARIABLE_JWT_AUDIENCE=$(printf %q "$SPIN_VARIABLE_JWT_AUDIENCE")")
  (umask 077 && printf '%s\n' "${made_up[@]}" >"$DEV_SECRETS")
  echo "up: development secrets, saved in $DEV_SECRETS (scripts/token.sh reads it):"
  printf '  %s\n' "${made_up[@]}"
fi

echo "up: serving with $("$SPIN" --version)"
echo "up: sale page: http://$LISTEN/shop/vouchers/<voucher id> (a buyer token: scripts/token.sh <user id>)"
exec "$SPIN" up --from "$MANIFEST" --listen "$LISTEN"
