#!/usr/bin/env bash
# Creates <repo>/.venv-localstack: a Python 3.12 venv with LocalStack's runtime (localstack-core),
# which tests/s3/s3server.py runs in-process (no Docker). Idempotent: a stamp file records what was
# installed, and a second run with the same pins does nothing.
#
# Why these pins:
#  - localstack-core 4.13.1 is the newest release that runs on 3.12: 4.14.0 and 2026.3.0 import
#    `warnings.deprecated` (Python 3.13 only), so S3 fails to load on 3.12.
#  - [base-runtime] is enough for S3; [runtime] would add awscli, moto-ext, jpype, opensearch, ...
#  - cbor2 6.x dropped the module `cbor2._decoder` that LocalStack imports (the runtime then dies
#    with "No component plugins found").
#  - service_identity is imported by Twisted's TLS code (LocalStack's gateway) but not declared.
#  - pyopenssl 26.1.0 is the newest release that keeps X509.add_extensions, which LocalStack calls
#    to make its self-signed certificate at every start in a fresh state directory (26.2.0 removed
#    it: the server then dies at start-up); 26.1.0 needs cryptography < 48, hence 47.0.0.
#  - The other exact pins freeze what was verified, so a new upstream release cannot break CI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${OSQUEUE_LOCALSTACK_VENV:-$root/.venv-localstack}"
pins=(
  "localstack-core[base-runtime]==4.13.1"
  "cbor2==5.9.0"
  "service_identity==26.1.0"
  "pyopenssl==26.1.0"
  "cryptography==47.0.0"
  "localstack-twisted==26.4.0"
  "rolo==0.8.9"
  "werkzeug==3.1.9"
  "plux==1.16.0"
)

find_python312() {
  local c candidates
  if [ -n "${OSQUEUE_PYTHON312:-}" ]; then
    candidates=("$OSQUEUE_PYTHON312")
  else
    # pyenv shims exist even when that version is not selected, so each candidate must actually run.
    mapfile -t candidates < <(
      echo python3.12
      ls -d "$(pyenv root 2>/dev/null || echo /root/.pyenv)"/versions/3.12.*/bin/python3 2>/dev/null | sort -rV
      ls -d /root/.pyenv/versions/3.12.*/bin/python3 2>/dev/null | sort -rV
      echo /usr/bin/python3.12
    )
  fi
  for c in "${candidates[@]}"; do
    if "$c" -c 'import sys, venv; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      command -v "$c"
      return
    fi
  done
  return 1
}

py="$(find_python312)" || {
  tried="${OSQUEUE_PYTHON312:-python3.12 on PATH, pyenv versions 3.12.*, /usr/bin/python3.12}"
  echo "setup-localstack: error: no working Python 3.12 (tried: $tried);" \
       "install one (e.g. 'pyenv install 3.12') or point OSQUEUE_PYTHON312 at one" >&2
  exit 1
}
stamp="$venv/.osqueue-localstack-stamp"
want="$("$py" -c 'import sys; print(sys.version.split()[0])') ${pins[*]}"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$venv/bin/python" -c 'import localstack.version' 2>/dev/null; then
  echo "setup-localstack: $venv is up to date" >&2
  exit 0
fi

echo "setup-localstack: creating $venv with $py" >&2
rm -rf "$venv"
"$py" -m venv "$venv"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$venv/bin/python" -m pip install -q "${pins[@]}" </dev/null >&2
# Importing the S3 provider and making a certificate the way the server does at start (in an empty
# directory: no cached certificate can hide a broken pin) catch broken pins here, not in a test.
"$venv/bin/python" - </dev/null >&2 <<'PY'
import os, tempfile
import localstack.aws.components, localstack.services.s3.provider  # noqa: F401
from localstack.utils.crypto import generate_ssl_cert
with tempfile.TemporaryDirectory() as d:
    generate_ssl_cert(target_file=os.path.join(d, "server.test.pem"), serial_number=1)
PY
echo "$want" >"$stamp"
echo "setup-localstack: installed $("$venv/bin/python" -c 'import localstack.version as v; print(v.version)') into $venv" >&2
