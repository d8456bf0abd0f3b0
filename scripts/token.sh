#!/usr/bin/env bash
# Mint a buyer token for local demos and tests: an HS256 JWT {"sub": "<user id>", "exp": ...}
# signed with the development secret, with the "iss" and "aud" the component checks
# (SPIN_VARIABLE_JWT_ISSUER, SPIN_VARIABLE_JWT_AUDIENCE: left out when empty). In production buyers get their tokens from the
# storefront's login, which holds jwt_secret; this script is not part of that.
#
#   scripts/token.sh <user id> [seconds valid, default 3600]
#
# The secret is SPIN_VARIABLE_JWT_SECRET, else the one scripts/up.sh made up and left in
# target/dev-secrets.env (with its issuer and audience). It refuses to run without one
# rather than guess. The component refuses a token valid for longer than its
# jwt_max_lifetime_s (a day by default).
set -euo pipefail

user=${1:-}
ttl=${2:-3600}
dev_secrets=$(cd "$(dirname "$0")/.." && pwd)/target/dev-secrets.env
if [ -z "${SPIN_VARIABLE_JWT_SECRET:-}" ] && [ -f "$dev_secrets" ]; then
  source "$dev_secrets"
fi
secret=${SPIN_VARIABLE_JWT_SECRET:-}
if [ -z "$secret" ]; then
  echo "token: set SPIN_VARIABLE_JWT_SECRET to the component's jwt_secret (scripts/up.sh" \
    "leaves the one it made up in target/dev-secrets.env)" >&2
  exit 2
fi
# The component takes a canonical positive 64-bit decimal (no sign, no leading zero).
if ! [[ "$user" =~ ^[1-9][0-9]{0,19}$ ]] || [ "${#user}" -eq 20 -a "$user" \> 18446744073709551615 ]; then
  echo "usage: token.sh <user id: a positive 64-bit integer> [seconds valid]" >&2
  exit 2
fi
if ! [[ "$ttl" =~ ^[1-9][0-9]{0,8}$ ]]; then
  echo "token: seconds valid must be a positive integer" >&2
  exit 2
fi

b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }
header=$(printf '{"alg":"HS256","typ":"JWT"}' | b64url)
# Only names and URLs are expected for issuer and audience: quotes and backslashes refused.
for claim in "${SPIN_VARIABLE_JWT_ISSUER:-}" "${SPIN_VARIABLE_JWT_AUDIENCE:-}"; do
  if [[ "$claim" == *[\"\\]* ]]; then
    echo "token: an issuer or audience with a quote or a backslash is not supported" >&2
    exit 2
  fi
done
claims=$(printf '{"sub":"%s","exp":%d' "$user" "$(($(date +%s) + ttl))")
[ -z "${SPIN_VARIABLE_JWT_ISSUER:-}" ] || claims+=$(printf ',"iss":"%s"' "$SPIN_VARIABLE_JWT_ISSUER")
[ -z "${SPIN_VARIABLE_JWT_AUDIENCE:-}" ] || claims+=$(printf ',"aud":"%s"' "$SPIN_VARIABLE_JWT_AUDIENCE")
claims=$(printf '%s}' "$claims" | b64url)
signature=$(printf '%s.%s' "$header" "$claims" |
  openssl dgst -sha256 -mac HMAC -macopt "key:$secret" -binary | b64url)
printf '%s.%s.%s\n' "$header" "$claims" "$signature"
