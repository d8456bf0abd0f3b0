#!/usr/bin/env bash
# The sale page in a real browser: headless Chromium (Debian's chromium and
# chromium-driver, installed when missing) driven over WebDriver by Python's selenium (a
# venv under target/), against the application served by Spin. The page is opened from a
# second origin, so that the API is called through CORS, and from the API's own origin.
# Then the operator's live view (/shop/live) while buyers buy, and the merchant's console
# (/shop/console) through a sale's whole life. All run against a Redis and a database of
# the run's own, so that /metrics lists only this run's vouchers. Each suite ends with
# "N passed, N failed"; exits non-zero on a failure.
#
# The build served is the default one, or with SECKILL_BUILD=p3 the WASIp3 build
# (spin-p3.toml) under the Spin in $SPIN, a Spin 4. `--console-only` runs the console's
# suite alone: what scripts/test.sh runs on the WASIp3 build, whose API the console drives
# through more routes than the other pages.
#
# The screenshots (sale-page.png, live-view.png, console.png) go to
# target/e2e/screenshots/, so that a test run leaves the tree clean; `--update-docs` writes
# them over the pictures in docs/ (docs/api.md's and docs/operations.md's) instead.
set -euo pipefail
source "$(dirname "$0")/e2e.sh"
cd "$ROOT"

SCREENSHOT_DIR=$E2E_DIR/screenshots
suites=(sale_page live_view console)
for option in "$@"; do
  case "$option" in
    --update-docs) SCREENSHOT_DIR=$ROOT/docs ;;
    --console-only) suites=(console) ;;
    *) echo "usage: test-browser.sh [--update-docs] [--console-only]" >&2; exit 2 ;;
  esac
done
export SCREENSHOT_DIR

browser_tools

setup
private_backends browser
PORT=$(free_port)
# The storefront's page is on localhost, the API on 127.0.0.1: two origins.
export SPIN_VARIABLE_ALLOWED_ORIGINS=http://localhost:$PORT
export SPIN_VARIABLE_API_ORIGIN=http://127.0.0.1:$PORT
serve
export PORT
# Python's bytecode cache would land beside the tests, in the tree.
export PYTHONDONTWRITEBYTECODE=1
status=0
for suite in "${suites[@]}"; do
  "$VENV/bin/python" "tests/browser/$suite.py" || status=1
done
exit $status
