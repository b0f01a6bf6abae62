#!/usr/bin/env bash
# README's main job: set up (idempotent), build and install osqueue, run the demo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash .ci/setup.sh --no-s3  # the demo needs no S3 server: no LocalStack venv
echo "[demo] installing osqueue into .venv (builds the Spark connector jar with sbt when sources changed)"
.venv/bin/python -m pip install -q --no-deps --force-reinstall .
exec .venv/bin/python integration/demo.py "$@"
