#!/usr/bin/env bash
# Run every test against real Redis and MariaDB and real Spin: formatting and lints, unit
# tests, the Lua and SQL integration tests and the schedule explorer, the built component
# served by `spin up` end to end (HTTP contract, CORS, concurrency, hostile input,
# faults), the OpenAPI contract checked by schemathesis, the sale page in headless
# Chromium, and several hosts behind a balancer with hosts and the Redis primary killed.
#
# Spin comes from $SPIN, else `spin` on PATH. A second Spin line, from $SPIN4 or `spin4`
# on PATH, runs all ten end-to-end suites again on the same .wasm (the contract and
# browser checks run under the first only); it is required when CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/common.sh
require_spin
scripts/services.sh
scripts/migrate.sh
scripts/build.sh
scripts/prometheus.sh

cargo fmt --all -- --check
# One lint pass: the components' code has no wasm32-only paths, so the native pass lints
# all of it (a second pass for wasm32 cost CI about four minutes); build.sh has compiled
# it for wasm32 above.
cargo clippy --workspace --all-targets -- -D warnings

echo "test: every suite under $("$SPIN" --version)"
cargo test --workspace
scripts/test-contract.sh
scripts/test-browser.sh
# Several hosts behind HAProxy, hosts and the Redis primary killed under a sale (bounded
# sales; `scripts/test-cluster.sh --soak` is the full-size run).
scripts/test-cluster.sh

SPIN4=${SPIN4:-$(command -v spin4 || true)}
if [ -z "$SPIN4" ]; then
  if [ "${CI:-}" = true ]; then
    echo "test: CI needs a Spin 4 too (set SPIN4 or put spin4 on PATH)" >&2
    exit 1
  fi
  echo "test: no Spin 4 found (SPIN4 or spin4 on PATH): the second Spin run is skipped"
  exit 0
fi
echo "test: end-to-end suites under $("$SPIN4" --version)"
# --workspace as above, so that cargo resolves the same features and reuses that build.
SPIN=$SPIN4 cargo test --workspace --test http_api --test cors --test concurrency --test hostile \
  --test faults --test buyer_orders --test request_log --test anonymous_flood --test prometheus \
  --test auth_tokens --test edges --test order_life --test one_write
