#!/usr/bin/env bash
# Build the components: for wasm32-wasip1 (what spin.toml's `source` lines point at), and
# the API's WASIp3 build for Spin 4 for wasm32-wasip2 (spin-p3.toml's, beside the shop's
# wasm32-wasip1 build).
#
#   scripts/build.sh            both
#   scripts/build.sh default    the wasm32-wasip1 build alone (the API, the sale page, the
#                               benchmark's floor)
#   scripts/build.sh p3         the WASIp3 build alone
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p target
for build in ${*:-default p3}; do
  case $build in
    default)
      target=wasm32-wasip1
      packages=(-p seckill -p seckill-shop -p bench-floor)
      built=(target/$target/release/seckill.wasm target/$target/release/seckill_shop.wasm)
      ;;
    p3)
      target=wasm32-wasip2
      packages=(-p seckill)
      built=(target/$target/release/seckill.wasm)
      ;;
    *)
      echo "usage: build.sh [default] [p3]" >&2
      exit 2
      ;;
  esac
  if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
  fi
  started=target/.build-started-$build
  touch "$started"
  cargo build --target "$target" --release "${packages[@]}"
  # The end-to-end tests refuse a .wasm older than its sources
  # (tests/integration/src/drivers/app.rs), and cargo leaves an up-to-date .wasm alone
  # (Cargo.toml or Cargo.lock touched, say): each is dated now. Unless a source changed
  # during the build: then it is dated as the build began, older than that source. Not
  # otherwise: older than the crates it was linked from, built meanwhile, it would be
  # built again by the next cargo build.
  if [ -n "$(find src core lua answer shop/src shop/static Cargo.toml Cargo.lock shop/Cargo.toml \
    -newer "$started" -not -name '.*' -print -quit)" ]; then
    touch -r "$started" "${built[@]}"
  else
    touch "${built[@]}"
  fi
  echo "build: ${built[*]}"
done
