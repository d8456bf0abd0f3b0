#!/usr/bin/env bash
# Build the components: for wasm32-wasip1 (what spin.toml's `source` lines point at), and
# the API's WASIp3 build for Spin 4 for wasm32-wasip2 (spin-p3.toml's).
set -euo pipefail
cd "$(dirname "$0")/.."

for target in wasm32-wasip1 wasm32-wasip2; do
  if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
  fi
done
started=$(date +%s.%N)
cargo build --target wasm32-wasip1 --release -p seckill -p seckill-shop
cargo build --target wasm32-wasip2 --release -p seckill
# Cargo leaves a .wasm alone when it finds nothing to rebuild (Cargo.toml or Cargo.lock
# touched, say), and the end-to-end tests refuse a .wasm older than its sources
# (tests/integration/src/app.rs). Built from the sources as they were when the build
# started: that is its time, so a source changed during the build still shows as newer.
touch -d "@$started" target/wasm32-wasip1/release/seckill.wasm target/wasm32-wasip1/release/seckill_shop.wasm \
  target/wasm32-wasip2/release/seckill.wasm
echo "build: target/wasm32-wasip1/release/seckill.wasm and seckill_shop.wasm (the sale page),"
echo "  target/wasm32-wasip2/release/seckill.wasm (the WASIp3 build, spin-p3.toml)"
