# Sourced by the other scripts (not run): root for installs, Debian's packages, and the
# Spin CLI.

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# apt_install PACKAGE...: from Debian's archive (the package lists refreshed once a run).
# Waits up to 5 minutes for another apt (a fresh machine's unattended upgrades, say) to
# let go of dpkg's lock rather than fail at once.
apt_updated=
apt_install() {
  local wait=(-o DPkg::Lock::Timeout=300)
  if [ -z "$apt_updated" ]; then
    as_root apt-get "${wait[@]}" update -qq
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" install -y -qq \
    --no-install-recommends "$@" >/dev/null
}

# require_spin: exports SPIN, the Spin CLI: $SPIN when set, else `spin` on PATH; stops
# with the way to install it when there is none.
require_spin() {
  SPIN=${SPIN:-$(command -v spin || true)}
  if [ -z "$SPIN" ] || [ ! -x "$SPIN" ]; then
    echo "no Spin found: set SPIN=/path/to/spin or put spin on PATH" >&2
    echo "install it: https://spinframework.dev/install (this project is tested with v3.6.3 and v4.0.2)" >&2
    exit 1
  fi
  export SPIN
  # The host's settings for a sale's crowd (docs/operations.md, "A host for a crowd"):
  # Spin serves at most this many requests at once and answers an empty 500 past it. A
  # waiting purchase holds one, about 1 to 2.5 MiB resident each.
  export SPIN_MAX_INSTANCE_COUNT=${SPIN_MAX_INSTANCE_COUNT:-5000}
}

# build_manifest: the manifest of the build under test, spin.toml or (SECKILL_BUILD=p3)
# spin-p3.toml.
build_manifest() {
  if [ "${SECKILL_BUILD:-}" = p3 ]; then echo spin-p3.toml; else echo spin.toml; fi
}

# build_served: scripts/build.sh of the build under test: the default build, and with
# SECKILL_BUILD=p3 the WASIp3 build too (spin-p3.toml takes the sale page from the
# default build). So a run on the default build never waits for the WASIp3 build that
# scripts/test.sh runs beside it.
build_served() {
  if [ "${SECKILL_BUILD:-}" = p3 ]; then
    "$(dirname "${BASH_SOURCE[0]}")/build.sh" default p3
  else
    "$(dirname "${BASH_SOURCE[0]}")/build.sh" default
  fi
}

# lint_builds: the cargo builds that follow lint the workspace's own crates as they compile
# them, clippy-driver being their compiler (as `cargo clippy` runs it for `cargo check`,
# and given `-D warnings` the way it gives it), so that no separate clippy pass compiles
# every dependency again in check mode. scripts/test.sh and scripts/bench.sh both build
# this way, so they share their builds.
lint_builds() {
  RUSTC_WORKSPACE_WRAPPER=$(command -v clippy-driver || echo "$(rustc --print sysroot)/bin/clippy-driver")
  export RUSTC_WORKSPACE_WRAPPER
  export CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
}
