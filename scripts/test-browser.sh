#!/usr/bin/env bash
# The sale page in a real browser: headless Chromium (Debian's chromium and
# chromium-driver, installed when missing) driven over WebDriver by Python's selenium (a
# venv under target/), against the application served by Spin. The page is opened from a
# second origin, so that the API is called through CORS, and from the API's own origin.
# Then the operator's live view (/shop/live) while buyers buy. Both run against a Redis
# and a database of the run's own, so that /metrics lists only this run's vouchers. Each
# suite ends with "N passed, N failed"; exits non-zero on a failure.
#
# The screenshots (sale-page.png, live-view.png) go to target/e2e/screenshots/, so that a
# test run leaves the tree clean; `--update-docs` writes them over the pictures in docs/
# (docs/api.md's and docs/operations.md's) instead.
set -euo pipefail
source "$(dirname "$0")/e2e.sh"
cd "$ROOT"

SCREENSHOT_DIR=$E2E_DIR/screenshots
case "$*" in
  "") ;;
  --update-docs) SCREENSHOT_DIR=$ROOT/docs ;;
  *) echo "usage: test-browser.sh [--update-docs]" >&2; exit 2 ;;
esac
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
"$VENV/bin/python" tests/browser/sale_page.py || status=1
"$VENV/bin/python" tests/browser/live_view.py || status=1
exit $status
