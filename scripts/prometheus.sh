#!/usr/bin/env bash
# Make sure Prometheus (`prometheus` and `promtool` on PATH) is installed, from Debian's
# `prometheus` package when it is missing. Run it, or source it from bash (it then also
# leaves `require_prometheus` defined).
#
# The package's postinst enables and starts a system-wide `prometheus` service on :9090
# where an init system lets it. Nothing here wants that daemon: the tests start their own
# Prometheus on a free port and scripts/watch.sh one in the foreground. So right after
# installing, the service this install started is stopped and disabled again (a
# Prometheus that was installed before is left alone).

require_prometheus() {
  if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    return 0
  fi
  declare -F apt_install >/dev/null || source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
  echo "prometheus: installing Debian's prometheus package"
  apt_install prometheus || return 1
  if [ -d /run/systemd/system ]; then
    as_root systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/prometheus ]; then
    as_root /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    as_root update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
  if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    echo "prometheus: the package did not put prometheus and promtool on PATH" >&2
    return 1
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  require_prometheus
  echo "prometheus: $(prometheus --version 2>&1 | head -n 1)"
else
  require_prometheus
fi
