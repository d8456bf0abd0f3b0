#!/usr/bin/env bash
# The flash-sale load benchmark under real Spin, side by side with Spin's own floors
# measured in the same run: starts the services, builds the component, the benchmark's
# floor component and the load driver, measures the paths with wrk and then whole sales
# (the sale clock; about five minutes in all), then writes BENCHMARKS.md, docs/bench.png
# and docs/sale-clock.png. Loopback only. Not part of scripts/test.sh or CI.
#
# `scripts/bench.sh --shapes line` runs one shape of the sale clock alone (names
# comma-separated; `line`, a sale whose buyers told sold out wait in its line, runs only
# so): no path is measured, and its tables go to DIR/sales.md, not BENCHMARKS.md (about
# two minutes; BENCHMARKS.md, "The line").
#
# SECKILL_BENCH_QUICK=1 makes it a reduced run (about a minute of measuring) that checks
# the benchmark end to end and writes its report into the output folder instead.
# SECKILL_BUILD=p3 (with SPIN pointing at a Spin 4.0) measures the WASIp3 build
# (spin-p3.toml) as seckill, against the same floor component and its WASIp3 build (the
# p3 floor, tests/bench/floor/spin-p3.toml), without the crowd of 3,000 connections
# (Spin 4.0.2 fails it, its floor included), and writes its report into the output folder
# too. With `--baseline-wasm target/wasm32-wasip1/release/seckill.wasm` the default build
# is served beside it: the two are compared in alternating turns at every level, and
# every shape of the sale clock runs on both (about 20 minutes in all):
#   SECKILL_BUILD=p3 SPIN=../shared/tools/spin4 scripts/bench.sh --out target/bench-p3 \
#     --baseline-wasm target/wasm32-wasip1/release/seckill.wasm
#
# Spin is `$SPIN`, else `spin` on PATH (../shared/tools is added when it exists); no
# Spin is an error. Installs wrk and the DejaVu font from Debian's packages when missing
# (root or sudo). Options go to `seckill-bench run`, e.g. `--out DIR` (default
# bench-out/) for the raw results and token file; `target/debug/seckill-bench report`
# redraws the report and charts from DIR/results.json.
#
# `--baseline-wasm PATH` (or SECKILL_BENCH_BASELINE_WASM=PATH) adds an A/B comparison of
# the sold-out path (or of purchases, with SECKILL_BENCH_AB_PATH=purchase): that build of
# seckill served beside the current one, the two measured in alternating wrk turns at 32
# and 128 connections (7 rounds of 5 s each, about 4 more minutes), and a section "This
# build against a baseline" in the report. Build the baseline outside the work tree:
#   git worktree add /tmp/seckill-base 13f4d04
#   (cd /tmp/seckill-base && CARGO_TARGET_DIR=/tmp/seckill-base-target \
#     cargo build --target wasm32-wasip1 --release -p seckill)
#   scripts/bench.sh --baseline-wasm /tmp/seckill-base-target/wasm32-wasip1/release/seckill.wasm
# A baseline whose schema or variables differ from this checkout's runs from its own
# manifest, on a database of its own migrated by its own script, its voucher ids started
# far above this one's so that the two share Redis without sharing a key (no sale clock
# then: the sales' checks read this build's database):
#   (cd /tmp/seckill-base && DB_NAME=seckill_base scripts/migrate.sh)
#   mysql -uroot seckill_base -e 'ALTER TABLE tb_voucher AUTO_INCREMENT = 1000000000'
#   SECKILL_BENCH_AB_PATH=purchase SECKILL_BENCH_BASELINE_MANIFEST=/tmp/seckill-base/spin.toml \
#   SECKILL_BENCH_BASELINE_MYSQL_URL='mysql://seckill:seckill@127.0.0.1:3306/seckill_base?prefer_socket=false' \
#     scripts/bench.sh --baseline-wasm /tmp/seckill-base-target/wasm32-wasip1/release/seckill.wasm
# Then `git worktree remove /tmp/seckill-base`.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

source scripts/common.sh
if [ -d ../shared/tools ]; then PATH="$PATH:$(cd ../shared/tools && pwd)"; fi
require_spin
echo "bench: $("$SPIN" --version) at $SPIN"

missing=()
command -v wrk >/dev/null || missing+=(wrk)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

scripts/services.sh
scripts/migrate.sh
# MySQL users of the benchmark's own, so that the servers' per-user counters tell its
# statements and connections from those of anything else using the same MariaDB:
# seckill_bench for the Spin applications, seckill_probe (PROCESS) for reading counters.
# userstat turns on MariaDB's per-user statistics. DB_ADMIN_ARGS as for migrate.sh.
read -r -a admin <<<"${DB_ADMIN_ARGS:--uroot}"
client=$(command -v mariadb || command -v mysql)
as_admin() { if [ -z "${DB_ADMIN_ARGS:-}" ] && [ "$(id -u)" -ne 0 ]; then sudo "$client" "${admin[@]}" "$@"; else "$client" "${admin[@]}" "$@"; fi; }
users=""
for host in localhost 127.0.0.1 ::1; do
  users+="CREATE USER IF NOT EXISTS 'seckill_bench'@'$host' IDENTIFIED BY 'seckill_bench';
GRANT ALL PRIVILEGES ON seckill.* TO 'seckill_bench'@'$host';
CREATE USER IF NOT EXISTS 'seckill_probe'@'$host' IDENTIFIED BY 'seckill_probe';
GRANT PROCESS ON *.* TO 'seckill_probe'@'$host';
"
done
as_admin <<<"$users SET GLOBAL userstat = ON;"
# Built as scripts/test.sh builds, so the two share their builds, and the floor component
# (which no test builds) is linted here.
lint_builds
scripts/build.sh
for target in wasm32-wasip1 wasm32-wasip2; do
  cargo build --quiet --target "$target" --release -p bench-floor
done
# The dev profile optimises the driver (see Cargo.toml) and shares its build with scripts/test.sh.
cargo build --quiet --workspace --bin seckill-bench

# A sale holds hundreds of connections at once, in the driver and in Spin.
ulimit -n "$(ulimit -Hn)"
export SECKILL_BENCH_SETUP_SECONDS=$((SECONDS - started))
target/debug/seckill-bench run "$@"
echo "bench: scripts/bench.sh took $((SECONDS - started)) s"
