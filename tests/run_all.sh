#!/usr/bin/env bash
# README's test command: sets up what is missing (idempotent), then runs every suite —
# the JVM tests (sbt, against real files and a real S3 server), the connector jar build,
# and the Python tests (pytest, incl. Spark and S3 servers) — and prints one closing line.
#
#   bash tests/run_all.sh [pytest args]   everything (CI, .ci/run; about 45 minutes cold on 2 cores)
#
# Lanes: the tests that need no jar (pytest -m "not jvm": the native client, CLI, stores and their
# test servers, then the same on Python 3.10 and 3.13) run in the background from the start, logged
# to target/test-reports/native.log and shown at the end. The foreground builds the jars and the
# wheel, then starts the JVM suites (sbt, jvm.log) and the tests that need the jars outside
# tests/spark with the pyspark matrix (side.log) in the background, and runs tests/spark itself.
# Every pytest test runs in exactly one lane (conftest.py's marker).
#   bash tests/run_all.sh --quick         the inner loop (under 3 minutes warm, CONTRIBUTING.md)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if [ "${1:-}" = "--quick" ]; then
  # The quick tier: what needs no server, no Spark session and no jar. One sbt runs the JVM core's
  # suites (but the S3 ones) and the newest line's connector suites that start no SparkSession,
  # in the background, while the Python unit tests run (from the checkout; no S3 or GCS server, no
  # Spark, no benchmark). pytest stays in the foreground: a background job of a script ignores
  # SIGINT, and so would the CLI processes the Ctrl-C tests start.
  shift
  bash .ci/setup.sh --no-s3 >/dev/null || exit 1
  start=$SECONDS
  spark_sessions="$(grep -l "LocalSparkSuite\|SparkSession" jvm/spark/src/test/scala/osqueue/spark/*Suite.scala \
    jvm/spark/src/test-lines/scala/osqueue/spark/*Suite.scala | xargs -n1 basename | sed 's/\.scala$//; s/^/-osqueue.spark./')"
  sbt_log="$(mktemp)"
  # shellcheck disable=SC2086
  OSQUEUE_PYTHON="$root/.venv/bin/python" bash .ci/sbt \
    "core/testOnly -osqueue.store.S3StoreSuite -osqueue.queue.SegmentedS3Suite" \
    "spark42_213/testOnly $(echo $spark_sessions)" </dev/null >"$sbt_log" 2>&1 &
  sbt_pid=$!
  echo "== Python unit tests (pytest; sbt runs the JVM suites meanwhile)"
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/python --ignore=tests/python/test_bench.py \
    --ignore=tests/python/test_s3.py --ignore=tests/python/test_gcs.py -k "not s3 and not real_spark" "$@"
  py=$?
  echo "== JVM core and newest-line connector suites (sbt)"
  wait $sbt_pid
  jvm=$?
  grep -E "^\[(error|info)\] (\*\*\*|Tests:|Failed|Passed|Run completed|All tests passed|  [^ ].*FAILED)|^\[error\]" "$sbt_log" | tail -n 40
  rm -f "$sbt_log"
  echo "quick tier: Python $([ $py = 0 ] && echo passed || echo FAILED), JVM $([ $jvm = 0 ] && echo passed || echo FAILED) in $((SECONDS - start)) s"
  [ $jvm = 0 ] && [ $py = 0 ]
  exit
fi

bash .ci/setup.sh || exit 1
step() { echo "== [$(date +%T)] $*"; }  # each step with its start time: where the run spends it
export OSQUEUE_PYTHON="$root/.venv/bin/python"
reports="$root/target/test-reports"
# The build's Maven repository too: sbt refuses to publish a version over an existing one.
rm -rf "$reports" jvm/*/target/test-reports jvm/spark/target/line-*/test-reports target/maven-repo
mkdir -p "$reports"

status=0
# The pyspark of every other Spark line (a few hundred MB each on a fresh machine) downloads while the
# JVM side builds; tests/spark_lines.sh waits for it (a lock in the script).
bash .ci/setup-pyspark-lines.sh >"$reports/setup-pyspark-lines.log" 2>&1 </dev/null &
# The native lane. It imports osqueue from the checkout (PYTHONPATH), not from .venv, where the
# foreground reinstalls the wheel meanwhile.
native_log="$reports/native.log"
(
  rc=0
  step "Python tests that need no jar (pytest -m 'not jvm')"
  PYTHONPATH="$root/python" .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m "not jvm" \
    --junitxml="$reports/pytest-native.xml" tests/python tests/s3 tests/faults tests/azure "$@"
  case $? in 0|5) ;; *) rc=1 ;; esac  # 5: a filter passed in "$@" selected nothing here
  step "The native client, the CLI and the wrapper on the oldest and newest Python claimed (3.10, 3.13)"
  bash tests/python_versions.sh "$reports" || rc=1
  exit $rc
) >"$native_log" 2>&1 </dev/null &
native_pid=$!

# Spark's scratch goes to dirs the run removes (conftest.py, build.sbt); a Spark killed with kill -9
# would otherwise leave its /tmp/spark-* behind. Checked at the end.
spark_scratch_in_tmp() { ls -d /tmp/spark-* /tmp/temporary-* 2>/dev/null | sort; }
spark_scratch_before="$(spark_scratch_in_tmp)"
step "Connector jars and the build's Maven repository (sbt)"
# The jars first: the Python tests need them and the build repository, and the JVM suites then run
# beside those tests (below) instead of before them.
bash .ci/sbt spark/assembly spark/package core/assembly core_2_12/assembly publishBuildRepo || status=1
step "Building the osqueue wheel (bundles the jars) and installing it into .venv"
rm -rf target/wheel
.venv/bin/python -m pip wheel -q --no-deps -w target/wheel . || status=1
wheel="$(ls target/wheel/osqueue-*.whl 2>/dev/null | head -1)"
.venv/bin/python -m pip install -q --no-deps --force-reinstall "$wheel" || status=1

# Three processes at once from here (most of their time is Spark and servers starting and waiting,
# not CPU): the JVM suites (sbt, logged to target/test-reports/jvm.log); the tests that need the jars
# outside tests/spark, the Ceph run and the pyspark matrix (side.log); Spark's own tests here.
jvm_log="$reports/jvm.log"
(
  rc=0
  step "The JVM tests (sbt): the core (Scala 2.13); each Spark line's suite, the full one on the newest"
  bash .ci/sbt test || rc=1
  keep_jvm_reports() { mkdir -p "$reports/$1"; cp jvm/*/target/test-reports/*.xml "$reports/$1/" 2>/dev/null || true; }
  keep_jvm_reports jvm
  for d in jvm/spark/target/line-*/test-reports; do  # one per Spark line (the same suite names)
    [ -d "$d" ] || continue
    line="$(basename "$(dirname "$d")")"; mkdir -p "$reports/jvm-$line"; cp "$d"/*.xml "$reports/jvm-$line/" 2>/dev/null || true
  done
  for kind in localstack ceph; do
    if [ "$kind" = localstack ]; then
      step "JVM S3 suites again, against LocalStack's S3 (the run above used moto)"
    else
      step "JVM S3 suites again, against Ceph RGW (cancelled with the reason when Ceph is not installed)"
    fi
    OSQUEUE_S3_KIND=$kind OSQUEUE_LOCALSTACK_PYTHON="$root/.venv-localstack/bin/python" \
      bash .ci/sbt "core/testOnly osqueue.store.S3StoreSuite osqueue.queue.QueueProducerSuite" || rc=1
    rm -rf "$reports/jvm-$kind"; mkdir -p "$reports/jvm-$kind"
    cp jvm/core/target/test-reports/TEST-osqueue.store.S3StoreSuite.xml \
       jvm/core/target/test-reports/TEST-osqueue.queue.QueueProducerSuite.xml "$reports/jvm-$kind/" 2>/dev/null || true
  done
  exit $rc
) >"$jvm_log" 2>&1 </dev/null &
jvm_pid=$!

side_log="$reports/side.log"
# shellcheck source=/dev/null
source .ci/pyspark-lines.env  # PYSPARK_LINE_VERSIONS, split between the two lanes below
(
  rc=0
  step "Python tests that need the jars, outside tests/spark (pytest -m jvm: integration, the benchmarks)"
  .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m jvm --junitxml="$reports/pytest-side.xml" \
    tests/python tests/s3 tests/faults integration "$@"
  case $? in 0|5) ;; *) rc=1 ;; esac  # 5: a filter passed in "$@" selected nothing here
  step "Python S3 tests again, against Ceph RGW (skipped with the reason when Ceph is not installed)"
  OSQUEUE_S3_KIND=ceph .venv/bin/python -m pytest -q -p no:cacheprovider --junitxml="$reports/pytest-ceph.xml" \
    tests/python/test_s3.py tests/python/test_store.py tests/python/test_queue.py -k "s3 or S3" || rc=1
  step "The connector in the pyspark of the other Spark lines but the newest (.ci/pyspark-lines.env)"
  OSQUEUE_PYSPARK_LINES="${PYSPARK_LINE_VERSIONS% *}" bash tests/spark_lines.sh "$wheel" "$reports" || rc=1
  exit $rc
) >"$side_log" 2>&1 </dev/null &
side_pid=$!

step "Spark's tests (pytest -m jvm: tests/spark, tests/azure; the rest runs beside them, see side.log)"
.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 -m jvm --junitxml="$reports/pytest.xml" \
  tests/spark tests/azure "$@"
case $? in 0|5) ;; *) status=1 ;; esac
# The matrix's newest line here: the side lane is the longer one without it.
step "The connector in the pyspark of the newest Spark line (.ci/pyspark-lines.env)"
OSQUEUE_PYSPARK_LINES="${PYSPARK_LINE_VERSIONS##* }" bash tests/spark_lines.sh "$wheel" "$reports" || status=1

step "Integration, the benchmarks, Ceph and the pyspark matrix (started beside Spark's tests; their log follows)"
wait $side_pid || status=1
cat "$side_log"

step "The JVM tests (started beside the jvm lanes; their log follows)"
wait $jvm_pid || status=1
cat "$jvm_log"

step "The native lane (started first; its log follows)"
wait $native_pid || status=1
cat "$native_log"

left="$(comm -13 <(echo "$spark_scratch_before") <(spark_scratch_in_tmp))"
if [ -n "$left" ]; then
  echo "FAILED: this run left $(wc -l <<<"$left") Spark scratch dirs in /tmp (a Spark started without the run's scratch dir, or another process on this machine):"
  head -5 <<<"$left"
  status=1
fi

# Closing lines over both runners (JUnit XML from sbt and pytest): each failure with the
# start of its message (CI shows only the end of the log), then one count line.
.venv/bin/python - "$reports" <<'PY'
import pathlib, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for d in sys.argv[1:]:
    for f in sorted(pathlib.Path(d).rglob("*.xml")):
        root = ET.parse(f).getroot()
        for s in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
            t, fl, er, sk = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
            passed += t - fl - er - sk; failed += fl + er; skipped += sk
            for case in s.iter("testcase"):
                for bad in list(case.findall("failure")) + list(case.findall("error")):
                    text = (bad.get("message") or bad.text or "").strip().replace("\n", " | ")
                    print(f"FAILED {case.get('classname')} :: {case.get('name')}: {text[:1500]}")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
