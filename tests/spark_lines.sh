#!/usr/bin/env bash
# The connector in every pyspark of the Spark-line matrix (.ci/pyspark-lines.env; venvs made by
# .ci/setup-pyspark-lines.sh): installs the osqueue wheel WHEEL into each and runs the line tests
# (existing Spark tests, selected below), writing JUnit XML to REPORTS/pyspark-<version>.xml.
#
#   bash tests/spark_lines.sh WHEEL REPORTS [extra pytest args]
#
# OSQUEUE_PYSPARK_LINES (a subset of PYSPARK_LINE_VERSIONS) runs only those lines: tests/run_all.sh
# splits the matrix between its two lanes.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
wheel="$1"; reports="$2"; shift 2
bash .ci/setup-pyspark-lines.sh || exit 1
# shellcheck source=/dev/null
source .ci/pyspark-lines.env
# Per line, what only a real pyspark process shows: kill -9 mid-stream and restart, exact counts; the
# jar choice and version check; spark-submit --packages from target/maven-repo, one short read; every
# entry point of the connector in a Spark Connect session (test_connect). On
# 3.5 (Scala 2.12, another Hadoop) also a checkpoint on s3a:// killed and restarted, and
# spark.jars.packages and the assembly jar next to hadoop-aws (4.1, the project venv, runs every
# Spark test). The sink's replay after a driver crash, batch reads, df.write with writer ids,
# AvailableNow and the end of a run dequeuing what Spark committed run on every line in Scala (the
# suites of jvm/spark/src/test-lines, which every line's sbt test runs: OsqueueSinkCommitterSuite's
# "a replayed batch id appends nothing, and a new driver's replay deletes its files" is the
# after-append crash point).
select="test_kill_dash_nine_mid_stream"
select="$select or test_spark_submit_packages_resolves_the_connector"
select="$select or test_spark_lines"
select="$select or test_connect"  # every entry point in a Spark Connect session (and the Python data source there, killed -9 twice too)
# The Python data source (osqueue_python, pyspark 4.0+; skipped on 3.5) in a classic session: batch read,
# df.write, AvailableNow through its sink, admission control on 4.2+ (tests/spark/python_source_scenario.py).
# test_kill_dash_nine_mid_stream above also selects the Python source's kill -9 twice (test_python_source.py),
# and test_connect its Connect server's kill -9: both marked line_ends, they run on the oldest and newest
# line with the source (4.0, 4.3; minutes each); OSQUEUE_EVERY_LINE=1 runs them on every line.
select="$select or test_python_source_on_this_line"
status=0
for version in ${OSQUEUE_PYSPARK_LINES:-$PYSPARK_LINE_VERSIONS}; do
  venv=".venv-pyspark/$version"
  k="$select"
  case "$version" in
    "${PYSPARK_LINE_VERSIONS%% *}") k="$k or test_checkpoint_on_s3a or test_packages" ;;  # the oldest: also the Scala 2.12 artifact from Maven
  esac
  echo "== pyspark $version"
  "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel" || { status=1; continue; }
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$reports/pyspark-$version.xml" \
    -o junit_suite_name="pyspark-$version" \
    tests/spark/test_source.py tests/spark/test_source_end_of_run.py tests/spark/test_sink.py \
    tests/spark/test_spark_lines.py tests/spark/test_s3a_checkpoint.py tests/spark/test_packages.py \
    tests/spark/test_connect.py tests/spark/test_python_source.py -k "$k" "$@" || status=1
done
exit $status
