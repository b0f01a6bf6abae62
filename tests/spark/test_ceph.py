"""The connector on Ceph RGW, a real S3-compatible server whose If-Match matches only unquoted
entity tags (docs/format.md §8): batch appends, an AvailableNow stream, and the native consumer."""

from __future__ import annotations

from .support import native_values, produce_entries
from .test_sink import read_queue
from .test_source import assert_exactly_once, flatten, run_query


def test_two_batch_appends_and_an_available_now_stream_on_ceph_rgw(spark, ceph_queue, tmp_path):
    uri, options = ceph_queue
    native = produce_entries(uri, batches=3, per_batch=2, store_options=options)
    appended = []
    for run in ("w1", "w2"):  # the second append replaces the manifest with If-Match
        rows = [(f"{run}-{i}", f"m-{run}") for i in range(4)]
        df = spark.createDataFrame(rows, "value string, metadata string").selectExpr(
            "value", "cast(metadata as binary) as metadata"
        )
        writer = df.coalesce(1).write.format("osqueue").mode("append")
        for k, v in options.items():
            writer = writer.option(k, v)
        writer.save(uri)
        appended += [v for v, _ in rows]
    expected = native + appended
    assert [v for v, _ in read_queue(spark, uri, options)] == expected
    # Taking the queue over bumps the epoch (If-Match), each commit dequeues (If-Match).
    batches, _ = run_query(spark, uri, tmp_path / "ckpt", options=options)
    assert_exactly_once(flatten(batches), expected)
    rest = native_values(uri, options)  # what Spark had not acked yet: a suffix, in order
    assert rest == expected[len(expected) - len(rest) :]
