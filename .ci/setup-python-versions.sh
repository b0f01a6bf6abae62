#!/usr/bin/env bash
# One venv per Python at the ends of what pyproject.toml claims (requires-python >= 3.10: the
# oldest, 3.10, and the newest released, 3.13), in .venv-python/<version>, with osqueue's
# dependencies and what tests/python_versions.sh runs (pytest, hypothesis, the pinned pyspark for the
# wrapper's tests, which start no Spark). The interpreters come from pyenv ($PYENV_ROOT, default
# ~/.pyenv); a missing one is reported and skipped. Cached by a stamp of the dependencies per venv.
#
#   bash .ci/setup-python-versions.sh       prints "<version> <venv python>" per ready venv
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PYTHON_VERSIONS="${OSQUEUE_PYTHON_VERSIONS:-3.10 3.13}"
pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
deps="$(sed -n '/^dependencies = \[/,/^\]/p' pyproject.toml | grep -o '"[^"]*"' | tr -d '"' | tr '\n' ' ')"
pyspark="$(grep -o '^spark = \["pyspark==[0-9.]*"' pyproject.toml | grep -o 'pyspark==[0-9.]*')"
extra="pytest>=8 hypothesis>=6.100 $pyspark"
for version in $PYTHON_VERSIONS; do
  interpreter="$(ls -d "$pyenv_root/versions/$version".* 2>/dev/null | sort -V | tail -1)"
  if [ -z "$interpreter" ] || [ ! -x "$interpreter/bin/python3" ]; then
    echo "[setup] no Python $version under $pyenv_root/versions: its tests are skipped" >&2
    continue
  fi
  venv=".venv-python/$version"
  stamp="$venv/.osqueue-deps-$(echo "$interpreter $deps $extra" | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    echo "[setup] creating $venv with $(basename "$interpreter")" >&2
    rm -rf "$venv"
    "$interpreter/bin/python3" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q $deps $extra >&2
    touch "$stamp"
  fi
  echo "$version $root/$venv/bin/python"
done
