#!/usr/bin/env bash
# The component on a 3-node MariaDB Galera cluster of the tests' own (tests/integration/src/
# galera.rs: private nodes on loopback ports, a proxy in front), under real Spin: the
# suite spin::galera, which scripts/suites.sh runs too. Needs scripts/build.sh's build.
#
#   scripts/test-galera.sh          the suite: a sale's buyers all cancelling at once
#                                   through a single writer and on every node, a node
#                                   SIGKILLed mid-sale and brought back
#   scripts/test-galera.sh --soak [N]
#                                   also N more runs (5 by default) of the sale whose
#                                   buyers all cancel at once on every node, with a line a
#                                   run and how many kept every promise, and a crowd sale's
#                                   clock on one server beside the cluster's
#                                   (docs/operations.md)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/services.sh
suite() { cargo test -q -p seckill-tests --test suite -- "$@" --nocapture; }
suite spin::galera
if [ "${1:-}" = --soak ]; then
  runs=${2:-5}
  kept=0
  for run in $(seq "$runs"); do
    if output=$(suite spin::galera::cancellations_at_once_on_every_node 2>&1); then
      kept=$((kept + 1))
      echo "galera soak: run $run kept every promise: $(grep '^galera' <<<"$output")"
    else
      echo "galera soak: run $run broke: $(grep -A1 'panicked' <<<"$output" | cut -c1-300)"
    fi
  done
  echo "galera soak: $kept of $runs runs kept every promise"
  suite spin::galera::a_sale_s_clock --ignored | grep '^galera'
fi
