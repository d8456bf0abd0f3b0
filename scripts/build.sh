#!/usr/bin/env bash
# Build the components for wasm32-wasip1 (what spin.toml's `source` lines point at).
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-wasip1; then
  rustup target add wasm32-wasip1
fi
cargo build --target wasm32-wasip1 --release -p seckill -p seckill-shop
echo "build: target/wasm32-wasip1/release/seckill.wasm and seckill_shop.wasm (the sale page)"
