#!/usr/bin/env bash
# Runs the integration suites (tests/integration/tests/suite: one test binary, its suites
# as modules) one at a time: each assumes it has the shared Redis and MariaDB to itself
# (some count their commands or connections), while its own tests run side by side.
#
#   scripts/suites.sh                       every suite
#   scripts/suites.sh spin '!spin::one_write'
#                                           the suites under `spin`, but one_write
#   scripts/suites.sh backends::returns     one suite
#
# A prefix picks the suites whose module path is it or starts with it and `::`; a prefix
# after `!` leaves those out. Every suite picked runs, and the script fails if any failed,
# naming them. Expects what scripts/test.sh sets up (services, migrations, the build).
set -euo pipefail
cd "$(dirname "$0")/.."

include=()
exclude=()
for arg in "$@"; do
  case $arg in
    '!'*) exclude+=("${arg#!}") ;;
    *) include+=("$arg") ;;
  esac
done

under() {
  local suite=$1 prefix
  shift
  for prefix in "$@"; do
    if [ "$suite" = "$prefix" ] || [[ $suite == "$prefix"::* ]]; then
      return 0
    fi
  done
  return 1
}

# --workspace, as scripts/test.sh builds, so that cargo resolves the same features and
# reuses that build.
suites=$(cargo test --workspace --test suite -- --list --format terse |
  sed -n 's/^\([a-z_0-9]*::[a-z_0-9]*\)::.*: test$/\1/p' | sort -u)
failed=()
for suite in $suites; do
  if [ ${#include[@]} -gt 0 ] && ! under "$suite" "${include[@]}"; then continue; fi
  if [ ${#exclude[@]} -gt 0 ] && under "$suite" "${exclude[@]}"; then continue; fi
  echo "suites: $suite"
  cargo test --workspace --test suite -- "$suite::" || failed+=("$suite")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "suites: failed: ${failed[*]}" >&2
  exit 1
fi
