#!/usr/bin/env bash
# One venv per pyspark of the Spark-line matrix (tests/spark_lines.sh), in .venv-pyspark/<version>,
# with osqueue's dependencies and what the Spark tests import; cached by version (a stamp per venv).
# The 4.1 line runs in the project venv (.venv), which has the full suite. tests/run_all.sh starts
# this in the background while the JVM side builds, and tests/spark_lines.sh runs it again: a lock
# makes the second wait for the first, then find every stamp.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p .venv-pyspark
exec 9>.venv-pyspark/.setup.lock
flock 9
# shellcheck source=/dev/null
source .ci/pyspark-lines.env
py="${OSQUEUE_BOOTSTRAP_PYTHON:-python3}"
deps="$(.venv/bin/python - <<'PY'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(" ".join(p["dependencies"]))
PY
)"
# pyspark's connect extra: the Connect client and server (tests/spark/test_connect.py). On 3.5 its
# numpy is 1.x, which the newest pyarrow no longer supports.
connect_extra() { case "$1" in 3.5.*) echo "pyarrow<18" ;; esac; }
for version in $PYSPARK_LINE_VERSIONS; do
  venv=".venv-pyspark/$version"
  stamp="$venv/.osqueue-deps-$(echo "$deps connect $(connect_extra "$version")" | sha256sum | cut -c1-16)"
  [ -f "$stamp" ] && continue
  echo "[setup] creating $venv (pyspark $version: a few hundred MB on first use)" >&2
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install -q "pyspark[connect]==$version" $(connect_extra "$version") pytest "moto[server]>=5.1" $deps
  touch "$stamp"
done
