#!/usr/bin/env bash
# The flash-sale load benchmark, side by side with the limits of its parts: starts the
# services, builds the component, the benchmark's redis-floor component, the test host
# and the load driver, measures (about three minutes), then writes BENCHMARKS.md and
# docs/bench.png. Loopback only. Not part of scripts/test.sh or CI.
#
# Installs wrk and the DejaVu font from Debian's packages when missing (root or sudo).
# Options go to `seckill-bench run`, e.g. `--out DIR` (default bench-out/) for the raw
# results, logs and token file; `target/debug/seckill-bench report` redraws the report
# and chart from DIR/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
command -v wrk >/dev/null || missing+=(wrk)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

scripts/services.sh
scripts/migrate.sh
scripts/build.sh
cargo build --quiet --target wasm32-wasip1 --release -p redis-floor
# The dev profile optimises these (see Cargo.toml) and shares its build with scripts/test.sh.
cargo build --quiet -p seckill-bench

# The burst holds thousands of connections at once, in the driver and in the host.
ulimit -n "$(ulimit -Hn)"
export SECKILL_BENCH_SETUP_SECONDS=$((SECONDS - started))
target/debug/seckill-bench run "$@"
echo "bench: scripts/bench.sh took $((SECONDS - started)) s"
