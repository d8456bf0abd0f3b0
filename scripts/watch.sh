#!/usr/bin/env bash
# Watch a sale with Prometheus: scrape the running component's GET /metrics once a
# second and serve Prometheus in the foreground (Ctrl-C stops it; nothing is kept).
#
#   scripts/watch.sh [BASE_URL]       BASE_URL defaults to http://127.0.0.1:3000 (scripts/up.sh)
#
# The admin token comes from SPIN_VARIABLE_ADMIN_TOKEN, else ADMIN. Prometheus listens
# on 127.0.0.1:${PROMETHEUS_PORT:-9090}. Prometheus is installed from Debian's package
# when missing (scripts/prometheus.sh).
set -euo pipefail
BASE=${1:-http://127.0.0.1:3000}
case $BASE in *://*) ;; *) BASE=http://$BASE ;; esac
BASE=${BASE%/}
PORT=${PROMETHEUS_PORT:-9090}
TOKEN=${SPIN_VARIABLE_ADMIN_TOKEN:-${ADMIN:-}}
if [ -z "$TOKEN" ]; then
  echo "watch: set SPIN_VARIABLE_ADMIN_TOKEN (or ADMIN) to the component's admin token" >&2
  exit 1
fi

source "$(dirname "$0")/prometheus.sh"

# Split BASE into scheme, host:port and path prefix for the scrape config.
scheme=${BASE%%://*}
rest=${BASE#*://}
target=${rest%%/*}
prefix=${rest#"$target"}

# Is the component there, and does it take the token? (only a hint: Prometheus retries)
if command -v curl >/dev/null; then
  status=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "$BASE/metrics" || true)
  [ "$status" = 200 ] || echo "watch: GET $BASE/metrics answers $status for now (is scripts/up.sh running, with this token?)" >&2
fi

# Config, token and storage in a temp dir, removed on exit. The token goes in a file
# (mode 600) rather than into the config.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(umask 077 && printf '%s' "$TOKEN" >"$dir/token")
cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: seckill
    scheme: $scheme
    metrics_path: $prefix/metrics
    authorization:
      type: Bearer
      credentials_file: $dir/token
    static_configs:
      - targets: ['$target']
EOF

# A query as a link to Prometheus' graph page (percent-encoding in plain bash).
urlencode() {
  local s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [a-zA-Z0-9._~-]) out+=$c ;;
      *) printf -v c '%%%02X' "'$c"; out+=$c ;;
    esac
  done
  printf '%s' "$out"
}
url="http://127.0.0.1:$PORT"
show() { # show TITLE QUERY
  printf '  %-32s %s\n  %-32s %s/graph?g0.tab=0&g0.range_input=5m&g0.expr=%s\n' \
    "$1" "$2" "" "$url" "$(urlencode "$2")"
}

echo "watch: Prometheus on $url, scraping $BASE/metrics every second"
echo "watch: queries (rates over 10 s: a flash sale is over in seconds):"
show "units left" 'seckill_voucher_units_left'
show "orders per second" 'sum by (voucher_id) (rate(seckill_voucher_orders_total[10s]))'
show "purchases per second, by outcome" 'sum by (outcome) (rate(seckill_purchase_outcomes_total[10s]))'
show "queue depth" 'seckill_queue_depth'
show "batch size, p90" 'histogram_quantile(0.9, sum by (le) (rate(seckill_commit_batch_size_bucket[1m])))'
show "batch size, mean" 'sum(rate(seckill_commit_batch_size_sum[1m])) / sum(rate(seckill_commit_batch_size_count[1m]))'
echo "watch: the component's own live view: $BASE/shop/live"
echo "watch: Ctrl-C stops Prometheus (a port clash? set PROMETHEUS_PORT)"

prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$PORT" --log.level=warn
