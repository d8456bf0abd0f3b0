#!/usr/bin/env bash
# The multi-host tests (tests/integration/tests/suite/spin/cluster.rs): each starts the topology of
# scripts/cluster.sh (3 Spin hosts behind HAProxy, Redis as a primary, a replica and a
# Sentinel behind a proxy that follows the primary), runs a sale under faults, checks
# the sale's promises and stops it.
#
#   scripts/test-cluster.sh          hosts killed and the Redis primary killed, bounded
#                                    sales (about a minute; scripts/test.sh runs it)
#   scripts/test-cluster.sh --soak   the same at full size, and a crowd of 3,000
#                                    connections over the hosts (a few minutes)
#
# Spin is `$SPIN`, else `spin` on PATH (../shared/tools is added when it exists).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
if [ -d ../shared/tools ]; then PATH="$PATH:$(cd ../shared/tools && pwd)"; fi
require_spin
only=(--skip a_crowd_above_one_hosts_cap)
if [ "${1:-}" = --soak ]; then
  shift
  export CLUSTER_SOAK=1
  only=()
  # wrk measures Spin's floor through the balancer for the crowd test.
  command -v wrk >/dev/null || apt_install wrk
fi
scripts/services.sh
scripts/migrate.sh
build_served
# One at a time: each test starts and stops the same topology. --workspace as in
# scripts/test.sh, so that cargo reuses that build.
cargo test --workspace --test suite -- spin::cluster:: --ignored --test-threads=1 --nocapture \
  ${only[@]+"${only[@]}"} "$@"
