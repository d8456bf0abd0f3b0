#!/usr/bin/env bash
# The multi-host tests (tests/integration/tests/cluster.rs): each starts the topology of
# scripts/cluster.sh (3 Spin hosts behind HAProxy, Redis as a primary, a replica and a
# Sentinel behind a proxy that follows the primary), runs a sale under faults, checks
# the sale's promises and stops it. A few minutes; not part of scripts/test.sh or CI.
# Spin is `$SPIN`, else `spin` on PATH (../shared/tools is added when it exists).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
if [ -d ../shared/tools ]; then PATH="$PATH:$(cd ../shared/tools && pwd)"; fi
require_spin
# wrk measures Spin's floor through the balancer for the crowd test.
command -v wrk >/dev/null || apt_install wrk
scripts/services.sh
scripts/migrate.sh
scripts/build.sh
# One at a time: each test starts and stops the same topology.
cargo test -p seckill-tests --test cluster -- --ignored --test-threads=1 --nocapture "$@"
