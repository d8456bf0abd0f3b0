#!/usr/bin/env bash
# Run every test against real Redis and MariaDB and real Spin: formatting and lints, unit
# tests, the Lua and SQL integration tests and the schedule explorer, the built component
# served by `spin up` end to end (HTTP contract, CORS, concurrency, hostile input,
# faults), the OpenAPI contract checked by schemathesis, the sale page in headless
# Chromium, several hosts behind a balancer with hosts and the Redis primary killed, and a
# real Redis Cluster with a primary killed and a slot migrated.
#
# Spin comes from $SPIN, else `spin` on PATH, and serves the default build. A Spin 4, from
# $SPIN4 or `spin4` on PATH, then serves the WASIp3 build (spin-p3.toml) to the end-to-end
# suites that drive what it does its own way (below; all of them with
# SECKILL_P3_SUITES=all), the merchant's console in Chromium, the multi-host tests and the
# Redis Cluster again; it is required when CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/common.sh
require_spin
SPIN4=${SPIN4:-$(command -v spin4 || true)}
if [ -z "$SPIN4" ] && [ "${CI:-}" = true ]; then
  echo "test: CI needs a Spin 4 too (set SPIN4 or put spin4 on PATH)" >&2
  exit 1
fi
# The builds below are the lint pass too (lint_builds, scripts/common.sh): the components
# for both wasm targets, the WASIp3 adapters included, and the tests; a separate `cargo
# clippy` cost CI four minutes from scratch. The benchmark's floor component, which no
# test builds, is linted as scripts/bench.sh builds it.
lint_builds
# step NAME COMMAND...: runs it and says how long it took (CI has 20 minutes for all).
step() {
  local name=$1 started=$SECONDS status=0
  shift
  "$@" || status=$?
  echo "test: $name took $((SECONDS - started)) s"
  return "$status"
}

cargo fmt --all -- --check
scripts/services.sh
scripts/migrate.sh
# What the checks after the suites install (Debian's prometheus and chromium, two Python
# venvs) comes over the network while the builds below take the cores.
mkdir -p target
(scripts/prometheus.sh && source scripts/e2e.sh && contract_tools && browser_tools) \
  >target/tools.log 2>&1 &
tools=$!
# The tests' native build (the unit tests and the suites' binary) runs beside the
# default build's wasm, whose link-time optimisation leaves a core idle for long
# stretches; cargo locks each target folder apart, so the two do not wait on each other.
cargo test --workspace --lib --bins --test suite --no-run >target/tests-build.log 2>&1 &
tests_build=$!
step build scripts/build.sh default
# The WASIp3 build is wanted only by the runs under Spin 4, after the default build's: it
# runs beside them at the lowest priority, on what their waits for Spin, Redis and MySQL
# leave of the cores (the runs on the default build build only that one: build_served).
rm -f target/p3-build.status
if [ -n "$SPIN4" ]; then
  (
    built=0
    nice -n 19 scripts/build.sh p3 >target/p3-build.log 2>&1 || built=$?
    # Whole, or not there yet, when read.
    echo "$built" >target/p3-build.status.part
    mv target/p3-build.status.part target/p3-build.status
  ) &
fi
# await_p3_build: waits for that build; fails, with its log, if it failed.
await_p3_build() {
  local waited=$SECONDS
  while [ ! -f target/p3-build.status ]; do sleep 1; done
  echo "test: waited $((SECONDS - waited)) s for the WASIp3 build"
  if [ "$(cat target/p3-build.status)" != 0 ]; then
    cat target/p3-build.log >&2
    echo "test: the WASIp3 build failed" >&2
    return 1
  fi
}
if ! wait "$tests_build"; then
  cat target/tests-build.log >&2
  echo "test: building the tests failed" >&2
  exit 1
fi
echo "test: the tests' build took $SECONDS s since the start"

echo "test: every suite under $("$SPIN" --version)"
step unit-tests cargo test --workspace --lib --bins
if ! wait "$tools"; then
  cat target/tools.log >&2
  echo "test: installing the checks' tools failed" >&2
  exit 1
fi
step suites scripts/suites.sh '!spin::galera'
# spin::galera runs on servers of its own (three MariaDB nodes and a Redis), not on the
# shared ones the other suites take in turn, and mostly waits on them (nodes joining,
# state transfers, orders expiring): on both builds, one after the other, beside the
# checks below, which mostly wait too.
galera() {
  step galera scripts/suites.sh spin::galera
  if [ -n "$SPIN4" ]; then
    await_p3_build
    echo "test: spin::galera on the WASIp3 build under $("$SPIN4" --version)"
    (export SECKILL_BUILD=p3 SPIN=$SPIN4 && step p3-galera scripts/suites.sh spin::galera)
  fi
}
galera >target/galera.log 2>&1 &
galera=$!
# The contract check and the pages in Chromium each serve the build on a Redis and a
# database of their own (scripts/e2e.sh, private_backends), and both mostly wait (on Spin,
# on the browser): side by side.
(step contract scripts/test-contract.sh) >target/contract.log 2>&1 &
contract=$!
browser_status=0
step browser scripts/test-browser.sh || browser_status=$?
contract_status=0
wait "$contract" || contract_status=$?
cat target/contract.log
if [ "$browser_status" -ne 0 ] || [ "$contract_status" -ne 0 ]; then
  echo "test: the contract check or the browser's run failed" >&2
  exit 1
fi
# Several hosts behind HAProxy, hosts and the Redis primary killed under a sale (bounded
# sales; `scripts/test-cluster.sh --soak` is the full-size run).
step hosts scripts/test-cluster.sh
# A real Redis Cluster: sales over its primaries, a primary killed, a slot migrated
# (bounded; `scripts/test-redis-cluster.sh --soak` is the full-size run).
step redis-cluster scripts/test-redis-cluster.sh
waited=$SECONDS
galera_status=0
wait "$galera" || galera_status=$?
cat target/galera.log
echo "test: waited $((SECONDS - waited)) s for spin::galera"
if [ "$galera_status" -ne 0 ]; then
  echo "test: spin::galera failed" >&2
  exit 1
fi

if [ -z "$SPIN4" ]; then
  echo "test: no Spin 4 found (SPIN4 or spin4 on PATH): the WASIp3 build's run is skipped"
  exit 0
fi
# The WASIp3 build (src/platform/p3, spin-p3.toml) under Spin 4: the end-to-end suites
# that drive what it does its own way (HTTP bodies and answers, Redis and MySQL
# connections and their failures, a Redis Cluster's slot map, the instance it keeps between
# requests, work after an answer), the merchant's console, the multi-host tests and the
# Redis Cluster. The rest drive the decisions both builds share, which the default build's
# run covers; `SECKILL_P3_SUITES=all scripts/test.sh` runs every suite on this build too
# (docs/spin.md). The contract check and the other pages' browser tests run on the
# default build alone: they drive the router, the validation and the sale page, which both
# builds share; the console drives a sale's whole life through the admin's routes.
await_p3_build
echo "test: the WASIp3 build's end-to-end suites under $("$SPIN4" --version)"
export SECKILL_BUILD=p3
# one_write is the default build's alone: Spin 4 writes a WASIp3 answer's head and body
# itself, apart when its body comes a moment after its head (docs/operations.md). The
# multi-host suite runs below, by scripts/test-cluster.sh, and spin::galera ran above.
if [ "${SECKILL_P3_SUITES:-}" = all ]; then
  p3_suites=(spin '!spin::one_write' '!spin::cluster' '!spin::galera')
else
  p3_suites=(spin::http_api spin::cors spin::hostile spin::slow_clients spin::faults
    spin::mysql_failover spin::mysql_connections spin::redis_connections spin::concurrency
    spin::buckets spin::anonymous_flood spin::auth_tokens spin::order_life spin::request_log
    spin::sale_changes)
fi
SPIN=$SPIN4 step p3-suites scripts/suites.sh "${p3_suites[@]}"
SPIN=$SPIN4 step p3-console scripts/test-browser.sh --console-only
SPIN=$SPIN4 step p3-hosts scripts/test-cluster.sh
# The cluster's faults and its slot map on this build; the suites the default build's run
# plays on a cluster read the sale as both builds do.
SPIN=$SPIN4 SECKILL_CLUSTER_SUITES=${SECKILL_P3_SUITES:-none} step p3-redis-cluster \
  scripts/test-redis-cluster.sh
