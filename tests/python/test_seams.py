"""Determinism seams: time comes from an injected ``Clock`` and randomness from an injected
``random.Random`` (the JVM's ``Clock`` and ``RandomSource``), so tests and simulations control
both. A source scan fails when a raw time or random call appears outside the allow-list below,
and when an allow-listed one disappears (then shrink the list). The JVM's twin: SeamsSuite."""

from __future__ import annotations

import pathlib
import re

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "osqueue"

RAW_CALLS = re.compile(
    r"\btime\.(?:time|time_ns|sleep|monotonic|monotonic_ns|perf_counter|perf_counter_ns)\("
    r"|\brandom\.(?:random|uniform|randint|randrange|choice|choices|shuffle|sample|getrandbits|Random|SystemRandom)\("
    r"|\bsecrets\.\w+\("
    r"|\bos\.urandom\("
    r"|\b(?:datetime\.)?datetime\.(?:now|utcnow|today)\("
    r"|\buuid\.uuid[14]\("
)

# (module path under python/osqueue, call) -> (count, why it is not behind the seam).
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("clock.py", "time.time_ns("): (1, "SystemClock: the seam itself"),
    ("clock.py", "time.monotonic("): (1, "SystemClock: the seam itself"),
    ("clock.py", "time.sleep("): (1, "SystemClock: the seam itself"),
    ("queue/data_prefix_owner.py", "random.Random("): (1, "the default rng when none is injected"),
    ("queue/queue_consumer.py", "random.Random("): (1, "the default rng when none is injected"),
    ("queue/cas_loop.py", "random.Random("): (1, "admin_loop's default rng when none is injected"),
    ("queue/group_committers.py", "random.Random("): (1, "the default rng of a committer when none is injected"),
    ("producer/producer.py", "random.Random("): (1, "the default rng of a spooled producer's appender"),
    ("producer/spool.py", "random.Random("): (1, "writer.id's 16 random bytes when no rng is injected"),
    ("producer/spool_uploader.py", "random.Random("): (1, "backoff jitter when no rng is injected"),
    ("spark_source/reader.py", "random.Random("): (1, "the default rng of a stream reader when none is injected"),
    ("spark_source/writer.py", "random.Random("): (1, "the default rng of a sink commit when none is injected"),
    ("spark_source/data_source.py", "random.Random("): (
        1,
        "the random part of a query run's id (made by Spark, once per run)",
    ),
    ("cli/seal.py", "random.Random("): (1, "`osqueue seal`'s appender names its segment objects (no rng to inject)"),
    ("format/incarnation.py", "secrets.randbelow("): (
        1,
        "a new incarnation must differ across seeded test queues (docs/format.md §5.2)",
    ),
    ("format/batch_names.py", "secrets.randbits("): (1, "a batch name's entropy when no rng is injected"),
    ("producer/producer.py", "time.monotonic("): (
        3,
        "the flush deadline is waited on a threading.Condition, which needs real time",
    ),
    ("store/local_file_system_store.py", "secrets.token_hex("): (1, "temporary file names: unique, never compared"),
    ("store/s3_store.py", "secrets.token_hex("): (1, "the probe object's name: unique, never compared"),
    ("store/s3_store.py", "secrets.token_bytes("): (1, "the conditional-write probe's wrong entity tag"),
    ("store/local_file_lock.py", "time.monotonic("): (
        2,
        "the local lock's timeout: a real wait between processes",
    ),
    ("store/local_file_lock.py", "time.sleep("): (1, "the local lock's spin: a real wait between processes"),
    ("store/endpoint_conditions.py", "time.sleep("): (1, "the probe's backoff: a real wait on a real store"),
    ("store/local_file_lock.py", "random.uniform("): (1, "the local lock's spin jitter"),
    ("store/gcs_store.py", "secrets.token_hex("): (1, "the probe object's name: unique, never compared"),
    ("store/azure_blob_store.py", "secrets.token_hex("): (1, "the probe object's name: unique, never compared"),
    ("store/azure_blob_store.py", "uuid.uuid4("): (1, "the probe's wrong entity tag: never matches"),
}


def _raw_calls() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for line in path.read_text(encoding="utf-8").splitlines():
            code = line.split("#", 1)[0]
            for match in RAW_CALLS.finditer(code):
                call = (
                    match.group(0).removeprefix("datetime.")
                    if match.group(0).startswith("datetime.datetime")
                    else match.group(0)
                )
                found[(module, call)] = found.get((module, call), 0) + 1
    return found


def test_no_raw_time_or_random_call_outside_the_seams() -> None:
    found = _raw_calls()
    unexplained = {k: n for k, n in found.items() if n > ALLOWED.get(k, (0, ""))[0]}
    assert not unexplained, (
        f"raw time/random calls outside the seams (inject the Clock / rng instead, or allow-list with a reason): {unexplained}"
    )
    stale = {k: v[0] for k, v in ALLOWED.items() if found.get(k, 0) < v[0]}
    assert not stale, f"allow-list entries no longer needed (lower or remove them): {stale}"


def test_the_scan_sees_a_raw_call() -> None:
    assert RAW_CALLS.search("    started = time.monotonic()")
    assert RAW_CALLS.search("x = random.random() + secrets.token_hex(4)")
    assert not RAW_CALLS.search("started = self._clock.monotonic()")
