"""The Python data source's sink commit without Spark: a replayed epoch adds nothing, and a replay after a
crash between the manifest append and the writer-state update appends a second copy that readers drop
(the sink's entry tag, docs/adr/0002)."""

from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("pyarrow", reason="osqueue.spark_source needs pyarrow (osqueue[spark])")

import osqueue  # noqa: E402
from osqueue.errors import WriterFencedError  # noqa: E402
from osqueue.spark_source.options import SinkOptions  # noqa: E402
from osqueue.spark_source.writer import (  # noqa: E402
    SinkCommitter,
    WriterState,
    arrow_rows,
    state_key,
    write_arrow_task,
    write_task,
)


def _values(queue: pathlib.Path) -> list[str]:
    with osqueue.Consumer(str(queue)) as c:
        out = []
        while (b := c.next_batch()) is not None:
            out += [v.decode() for v in b.entries]
            c.ack(b.sequence)
        return out


def test_a_replay_after_a_crash_before_the_state_write_is_dropped_by_readers(tmp_path: pathlib.Path) -> None:
    options = SinkOptions.parse({"path": str(tmp_path), "writerId": "w"})
    committer = SinkCommitter(options, "python:/ckpt")
    assert committer.commit(0, [write_task(options, iter([(b"a", None), (b"b", b"m")]))])
    # The crash: the manifest holds epoch 0, the writer state does not.
    (tmp_path / state_key(options.location.manifest_path, "w")).unlink()
    assert committer.commit(0, [write_task(options, iter([(b"a", None), (b"b", b"m")]))])
    assert committer.commit(1, [write_task(options, iter([(b"c", None)]))])
    assert _values(tmp_path) == ["a", "b", "c"]


def test_a_writer_id_of_batch_writes_is_refused_to_a_stream(tmp_path: pathlib.Path) -> None:
    options = SinkOptions.parse({"path": str(tmp_path), "writerId": "w", "writerBatchId": "3"})
    assert SinkCommitter(options, "df.write").commit(3, [write_task(options, iter([(b"a", None)]))])
    stream = SinkOptions.parse({"path": str(tmp_path), "writerId": "w"})
    with pytest.raises(Exception, match=r"\[OSQUEUE_WRITER_OWNED_BY_ANOTHER_QUERY\] sink writer 'w' belongs to batch"):
        SinkCommitter(stream, "python:/ckpt").commit(0, [write_task(stream, iter([(b"x", None)]))])
    assert _values(tmp_path) == ["a"]


def test_a_df_write_without_a_writer_id_appends_once_and_writes_no_state(tmp_path: pathlib.Path) -> None:
    # df.write with no writerId: a plain append (no replay detection), as the JVM sink does.
    options = SinkOptions.parse({"path": str(tmp_path)})
    assert SinkCommitter(options, None).commit(0, [write_task(options, iter([(b"a", None), (b"b", None)]))])
    assert _values(tmp_path) == ["a", "b"]
    assert not list(tmp_path.rglob("*.writers*"))


def _state(tmp_path: pathlib.Path, options: SinkOptions) -> WriterState:
    key = state_key(options.location.manifest_path, options.writer_id or "")
    return WriterState.decode(key, (tmp_path / key).read_bytes())


def test_a_driver_fenced_by_a_newer_run_of_its_writer_lands_nothing_and_deletes_its_own_files(
    tmp_path: pathlib.Path,
) -> None:
    """As the JVM sink (OsqueueSinkCommitterSuite): the same query's checkpoint run again elsewhere
    claims the writer (generation + 1) and the old driver's next commit lands nothing."""
    options = SinkOptions.parse({"path": str(tmp_path), "writerId": "w"})
    old_run, new_run = "01M8BM0000000000000000000A", "01M8BM0000000000000000000B"  # ULIDs: ordered
    old = SinkCommitter(options, "python:/ckpt", run=old_run)
    assert old.commit(0, [write_task(options, iter([(b"a", None)]))])
    assert _state(tmp_path, options).generation == 1
    assert old.commit(1, [write_task(options, iter([(b"b", None)]))])
    assert _state(tmp_path, options).generation == 1, "a run claims once"
    newer = SinkCommitter(options, "python:/ckpt", run=new_run)  # restarted elsewhere: replays batch 1
    assert not newer.commit(1, [write_task(options, iter([(b"b", None)]))])
    assert _state(tmp_path, options).generation == 2
    late = write_task(options, iter([(b"late", None)]))
    with pytest.raises(WriterFencedError, match="sink writer 'w' with generation 1 was fenced: generation 2"):
        old.commit(2, [late])
    assert not (tmp_path / late.batches[0].location).exists(), "the fenced driver's files were left behind"
    # Another process of the old run (pyspark commits each micro-batch in a fresh Python worker).
    with pytest.raises(WriterFencedError, match="an older generation was fenced"):
        SinkCommitter(options, "python:/ckpt", run=old_run).commit(2, [write_task(options, iter([(b"x", None)]))])
    assert newer.commit(2, [write_task(options, iter([(b"c", None)]))])
    assert _values(tmp_path) == ["a", "b", "c"]


def test_a_claim_between_the_state_read_and_the_manifest_write_fences_that_write(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every manifest write attempt re-checks the claim (JVM: the appender's beforeWrite)."""
    options = SinkOptions.parse({"path": str(tmp_path), "writerId": "w"})
    old = SinkCommitter(options, "python:/ckpt", run="01M8BM0000000000000000000A")
    assert old.commit(0, [write_task(options, iter([(b"a", None)]))])
    real_claim = SinkCommitter._claim

    def claim_then_newer_run_claims(self: SinkCommitter, state: WriterState | None) -> None:
        real_claim(self, state)
        if self is old:
            SinkCommitter(options, "python:/ckpt", run="01M8BM0000000000000000000B")._claim(state)

    monkeypatch.setattr(SinkCommitter, "_claim", claim_then_newer_run_claims)
    late = write_task(options, iter([(b"late", None)]))
    with pytest.raises(WriterFencedError):
        old.commit(1, [late])
    assert _values(tmp_path) == ["a"]
    assert not (tmp_path / late.batches[0].location).exists()


def _files(tmp_path: pathlib.Path, message: object) -> list[tuple[bytes, int, list[tuple[int, bytes]]]]:
    """Each written file's bytes, record count and metadata items (index, payload; not the time)."""
    return [
        ((tmp_path / b.location).read_bytes(), b.records, [(m.start_index, m.payload) for m in b.metadata])
        for b in message.batches  # type: ignore[attr-defined]
    ]


@pytest.mark.parametrize(("flush", "compression"), [(3, "none"), (40, "zstd"), (1 << 20, "none")])
def test_the_column_wise_sink_writes_the_row_wise_sinks_files(
    tmp_path: pathlib.Path, compression: str, flush: int
) -> None:
    """Issue 27: the sink task takes a value column's records from Arrow's buffers; the files, where
    they are cut, and their metadata are the row-wise path's (empty values, a string column, a sliced
    batch, cuts inside and across Arrow batches)."""
    import random

    import pyarrow as pa

    rng = random.Random(27)
    values = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 0, 1, 5, 13, 40]))) for _ in range(100)]
    binary = pa.record_batch([pa.array(values, pa.binary())], names=["value"])
    text = pa.record_batch([pa.array([v.hex() for v in values[:20]], pa.string())], names=["value"])
    large = pa.record_batch([pa.array(values[:10], pa.large_binary())], names=["value"])
    batches = [
        binary.slice(3, 40),
        text,
        pa.record_batch([pa.array([], pa.binary())], names=["value"]),
        large,
        binary.slice(43),
    ]
    out = {}
    for path in ("rows", "columns"):
        root = tmp_path / path
        options = SinkOptions.parse({"path": str(root), "flushSizeBytes": str(flush), "compression": compression})
        if path == "rows":
            message = write_task(options, arrow_rows(iter(batches), 0, None))
        else:
            message = write_arrow_task(options, iter(batches), 0, None)
        out[path] = _files(root, message)
    assert out["columns"] == out["rows"]
    assert sum(n for _, n, _ in out["rows"]) == 40 + 20 + 10 + 57
    assert len(out["rows"]) > 1 or flush == 1 << 20


def test_the_column_wise_sink_refuses_a_null_value_and_leaves_no_file(tmp_path: pathlib.Path) -> None:
    import pyarrow as pa

    options = SinkOptions.parse({"path": str(tmp_path), "flushSizeBytes": "1"})
    batches = [
        pa.record_batch([pa.array([b"a", b"b"])], names=["value"]),
        pa.record_batch([pa.array([b"c", None])], names=["value"]),
    ]
    with pytest.raises(Exception, match=r"\[OSQUEUE_SINK_NULL_VALUE\]"):
        write_arrow_task(options, iter(batches), 0, None)
    assert [f for f in tmp_path.rglob("*") if f.is_file()] == []
