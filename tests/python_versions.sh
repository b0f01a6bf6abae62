#!/usr/bin/env bash
# The native client, the CLI and the Spark wrapper on the oldest and the newest Python osqueue
# claims (3.10 and 3.13; venvs made by .ci/setup-python-versions.sh, from pyenv). Runs the package
# from the checkout, against no server and no Spark: the formats and golden vectors, the queue
# protocol, producer, consumer and GC on in-memory and local stores, the CLI, and the wrapper's
# options and jar choice. A Python that is not installed is skipped with the reason.
#
#   bash tests/python_versions.sh REPORTS [extra pytest args]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
reports="$1"; shift
venvs="$(bash .ci/setup-python-versions.sh)" || exit 1
status=0
while read -r version python; do
  [ -n "$version" ] || continue
  echo "== Python $version ($("$python" -c 'import platform; print(platform.python_version())'))"
  "$python" -m pytest -q -p no:cacheprovider --junitxml="$reports/python-$version.xml" -o junit_suite_name="python-$version" \
    tests/python/test_format.py tests/python/test_golden.py tests/python/test_manifest_head.py \
    tests/python/test_queue.py tests/python/test_producer.py tests/python/test_consumer.py tests/python/test_gc.py \
    tests/python/test_segmented.py tests/python/test_cli.py tests/python/test_spark_wrapper.py \
    tests/python/test_vocabulary.py tests/python/test_imports.py \
    -m "not jvm" -k "not s3" "$@" || status=1
done <<< "$venvs"
exit $status
