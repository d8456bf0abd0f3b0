#!/usr/bin/env bash
# Run every test against real Redis and MariaDB: formatting and lints, unit tests, the Lua
# and SQL integration tests, and the end-to-end, concurrency, fault and hostile-input
# tests of the built component served by the test host.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/services.sh
scripts/migrate.sh
scripts/build.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p seckill --target wasm32-wasip1 -- -D warnings
cargo test --workspace
