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
mkdir -p target
started=target/.build-started
touch "$started"
cargo build --target wasm32-wasip1 --release -p seckill -p seckill-shop -p bench-floor
cargo build --target wasm32-wasip2 --release -p seckill
# The end-to-end tests refuse a .wasm older than its sources (tests/integration/src/drivers/app.rs),
# and cargo leaves an up-to-date .wasm alone (Cargo.toml or Cargo.lock touched, say): each
# is dated now. Unless a source changed during the build: then it is dated as the build
# began, older than that source. Not otherwise: older than the crates it was linked from,
# built meanwhile, it would be built again by the next cargo build.
built=(target/wasm32-wasip1/release/seckill.wasm target/wasm32-wasip1/release/seckill_shop.wasm
  target/wasm32-wasip2/release/seckill.wasm)
if [ -n "$(find src core lua answer shop/src shop/static Cargo.toml Cargo.lock shop/Cargo.toml \
  -newer "$started" -not -name '.*' -print -quit)" ]; then
  touch -r "$started" "${built[@]}"
else
  touch "${built[@]}"
fi
echo "build: target/wasm32-wasip1/release/seckill.wasm and seckill_shop.wasm (the sale page),"
echo "  target/wasm32-wasip2/release/seckill.wasm (the WASIp3 build, spin-p3.toml)"
