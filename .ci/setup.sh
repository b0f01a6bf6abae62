#!/usr/bin/env bash
# Idempotent environment setup shared by README's commands and CI: a JDK 17, the project venv
# (.venv) with osqueue and its test dependencies, and LocalStack's own venv. Cached: a second run
# only checks stamps. Nothing here names a registry host; pip and Maven use the machine's config.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { echo "[setup] $*" >&2; }

need_apt=()
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing ${need_apt[*]} with apt"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "osqueue needs ${need_apt[*]} (a JDK 17 and Maven); install them and re-run" >&2
    exit 1
  fi
fi

# Python >= 3.10 for the project venv.
py="${OSQUEUE_BOOTSTRAP_PYTHON:-python3}"
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
  echo "osqueue needs Python >= 3.10 (found $("$py" --version 2>&1)); set OSQUEUE_BOOTSTRAP_PYTHON" >&2; exit 1; }

stamp=".venv/.osqueue-deps-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  log "creating .venv and installing osqueue's dependencies (pyspark is large: a few minutes)"
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # Dependencies only: the package itself is (re)installed after each jar build.
  .venv/bin/python - <<'PY' > .venv/requirements.txt
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"] + p["optional-dependencies"]["bench"]))
PY
  .venv/bin/python -m pip install -q -r .venv/requirements.txt
  rm -f .venv/.osqueue-deps-*
  touch "$stamp"
fi

# LocalStack (S3, in-process) needs Python >= 3.12 and pins of its own: a separate venv.
bash .ci/setup-localstack.sh

# sbt itself needs no step here: .ci/sbt fetches its launcher through Maven on first use.
log "environment ready"
