#!/usr/bin/env bash
# Idempotent environment setup shared by README's commands and CI: a JDK >= 17 and Maven, the
# project venv (.venv) with osqueue and its test dependencies, and LocalStack's own venv.
# Cached: a second run only checks stamps. Nothing here names a registry host; pip and Maven use
# the machine's config.
#
#   bash .ci/setup.sh            everything (tests/run_all.sh)
#   bash .ci/setup.sh --no-s3    without LocalStack's venv (the demo needs no S3 server, and
#                                LocalStack needs a Python 3.12 the demo has no use for)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

with_s3=1
for arg in "$@"; do
  case "$arg" in
    --no-s3) with_s3=0 ;;
    *) echo "setup.sh: unknown argument '$arg' (known: --no-s3)" >&2; exit 2 ;;
  esac
done

log() { echo "[setup] $*" >&2; }
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {
  log "installing $* with apt"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The major version of the javac on PATH ("javac 17.0.15" -> 17, "javac 1.8.0_292" -> 8), or 0.
jdk_major() {
  local v
  v="$(javac -version 2>&1 | awk '/^javac /{print $2; exit}')" || true
  case "$v" in
    1.*) v="${v#1.}" ;;
  esac
  v="${v%%[!0-9]*}"
  echo "${v:-0}"
}

need_apt=()
if ! command -v javac >/dev/null 2>&1 || [ "$(jdk_major)" -lt 17 ]; then
  need_apt+=(openjdk-17-jdk-headless)
fi
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  if can_apt; then
    apt_install "${need_apt[@]}"
  else
    echo "osqueue needs ${need_apt[*]} (a JDK >= 17 and Maven); install them and re-run" >&2
    exit 1
  fi
fi
# LocalCoarseTimestampSuite loop-mounts an ext4 image (as root only; skipped otherwise).
if can_apt && ! command -v mkfs.ext4 >/dev/null 2>&1; then
  apt_install e2fsprogs
fi
# An older JDK can stay first on PATH after apt installed 17 (alternatives set by hand).
major="$(jdk_major)"
if [ "$major" -lt 17 ]; then
  echo "osqueue needs a JDK >= 17, but the javac on PATH ($(command -v javac)) is version $major;" \
       "put a JDK 17 first on PATH (e.g. update-alternatives --config javac) and re-run" >&2
  exit 1
fi

# Python >= 3.10 for the project venv.
py="${OSQUEUE_BOOTSTRAP_PYTHON:-python3}"
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
  echo "osqueue needs Python >= 3.10 (found $("$py" --version 2>&1)); set OSQUEUE_BOOTSTRAP_PYTHON" >&2; exit 1; }

# LocalStack (S3, in-process) needs Python >= 3.12 and pins of its own: a separate venv, made while
# the project venv installs (both mostly wait on downloads).
if [ "$with_s3" = 1 ]; then
  bash .ci/setup-localstack.sh &
  localstack_pid=$!
fi

stamp=".venv/.osqueue-deps-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "creating .venv and installing osqueue's dependencies (pyspark is large: a few minutes)"
  if [ ! -x .venv/bin/python ]; then
    # Debian/Ubuntu ship venv's pip bootstrap (ensurepip) separately, in python3.X-venv.
    if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
      venv_pkg="python$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv"
      if can_apt; then
        apt_install "$venv_pkg"
      else
        echo "'$py -m venv' does not work here (no ensurepip); install $venv_pkg and re-run" >&2
        exit 1
      fi
    fi
    rm -rf .venv  # a venv half-made by a failed attempt
    "$py" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  # Reading pyproject.toml needs tomllib (Python 3.11+) or, on 3.10, its backport tomli.
  if ! .venv/bin/python -c 'import tomllib' >/dev/null 2>&1; then
    .venv/bin/python -m pip install -q tomli
  fi
  # Dependencies only: the package itself is (re)installed after each jar build.
  .venv/bin/python - <<'PY' > .venv/requirements.txt
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = p["optional-dependencies"]
print("\n".join(p["dependencies"] + extras["test"] + extras["bench"] + extras["lint"]))
PY
  .venv/bin/python -m pip install -q -r .venv/requirements.txt
  rm -f .venv/.osqueue-deps-*
  touch "$stamp"
fi

if [ "$with_s3" = 1 ]; then
  wait "$localstack_pid" || { echo "setup.sh: LocalStack's venv could not be made (its log is above)" >&2; exit 1; }
else
  log "skipping LocalStack's venv (--no-s3)"
fi

# Ceph RGW (one-node cluster started per test session by tests/s3/s3server.py --kind ceph). Without
# it the Ceph tests are reported as skipped with this reason, so a missing install never fails setup.
ceph_packages=(radosgw ceph-mon ceph-osd ceph-common)
if [ "$with_s3" = 1 ] && ! command -v radosgw >/dev/null 2>&1; then
  if can_apt; then
    log "installing Ceph RGW with apt (64 packages, ~260 MB installed)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${ceph_packages[@]}" >/dev/null || log "Ceph RGW could not be installed; its tests will be skipped"
  else
    echo "osqueue's Ceph RGW tests need ${ceph_packages[*]} (apt, as root); they will be skipped" >&2
  fi
fi

# azurite (Azure Blob Storage emulator, npm) for the Azure store's tests, started per test session by
# tests/azure/azurite_server.py: pinned, in .cache/azurite of the checkout (not global). Without
# node/npm the Azure tests are reported as skipped with the reason.
azurite_version=3.35.0
azurite_dir=".cache/azurite"
if [ ! -x "$azurite_dir/node_modules/.bin/azurite-blob" ] || [ ! -f "$azurite_dir/.osqueue-$azurite_version" ]; then
  if command -v npm >/dev/null 2>&1; then
    log "installing azurite $azurite_version with npm into $azurite_dir"
    mkdir -p "$azurite_dir"
    (cd "$azurite_dir" && npm install --no-audit --no-fund --loglevel=error --prefix . "azurite@$azurite_version" >/dev/null) \
      && rm -f "$azurite_dir"/.osqueue-* && touch "$azurite_dir/.osqueue-$azurite_version" \
      || log "azurite could not be installed; the Azure tests will be skipped"
  else
    log "npm not found: azurite is not installed; the Azure tests will be skipped"
  fi
fi

# sbt itself needs no step here: .ci/sbt fetches its launcher through Maven on first use.
log "environment ready"
