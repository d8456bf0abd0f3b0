# Sourced by the scripts that run Spin: puts the Spin CLI in $SPIN, taken from $SPIN when
# set, else `spin` on PATH; fails with the way to install it when there is none.
if [ -z "${SPIN:-}" ]; then
  SPIN=$(command -v spin || true)
fi
if [ -z "$SPIN" ] || [ ! -x "$SPIN" ]; then
  echo "no Spin found: set SPIN=/path/to/spin or put spin on PATH" >&2
  echo "install it: https://spinframework.dev/install (this project is tested with v3.6.3 and v4.0.2)" >&2
  exit 1
fi
export SPIN
