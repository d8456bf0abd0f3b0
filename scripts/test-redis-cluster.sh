#!/usr/bin/env bash
# The component on a real Redis Cluster (tests/integration/tests/suite/spin/redis_cluster.rs):
# each test starts scripts/redis-cluster.sh's three primaries and their replicas, serves
# the built component on them with real Spin (`redis_cluster_nodes`), runs its sales and
# faults, checks the sales' promises and stops the cluster; then end-to-end suites run
# on a cluster too.
#
#   scripts/test-redis-cluster.sh          bounded sales (scripts/test.sh runs it on both
#                                          builds: SECKILL_BUILD=p3 with SPIN a Spin 4,
#                                          its suites on a cluster left out)
#   scripts/test-redis-cluster.sh --soak   the same at full size
#
# Spin is `$SPIN`, else `spin` on PATH (../shared/tools is added when it exists).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
if [ -d ../shared/tools ]; then PATH="$PATH:$(cd ../shared/tools && pwd)"; fi
require_spin
if [ "${1:-}" = --soak ]; then
  shift
  export CLUSTER_SOAK=1
fi
scripts/services.sh
scripts/migrate.sh
build_served
# One at a time: each test starts and stops the same cluster.
cargo test --workspace --test suite -- spin::redis_cluster:: --ignored --test-threads=1 \
  --nocapture "$@"
# Then the end-to-end suites that read the sale's Redis state only as a sale record does
# (crate::invariants), on a cluster of their own: the others count one server's commands
# and connections, stop it, or write its keys. SECKILL_CLUSTER_SUITES=none leaves them out
# (scripts/test.sh's run on the WASIp3 build).
if [ "${SECKILL_CLUSTER_SUITES:-}" = none ]; then
  exit 0
fi
REDIS_CLUSTER_BASE=7100 scripts/redis-cluster.sh up
trap 'REDIS_CLUSTER_BASE=7100 scripts/redis-cluster.sh down' EXIT
SECKILL_REDIS_CLUSTER_NODES=$(REDIS_CLUSTER_BASE=7100 scripts/redis-cluster.sh env |
  sed -n 's/^REDIS_CLUSTER_NODES=//p') \
  scripts/suites.sh spin::concurrency spin::buckets spin::auth_tokens spin::anonymous_flood spin::buyer_orders \
  spin::request_log spin::prometheus spin::line
