"""The Python data source's sink commit without Spark: a replayed epoch adds nothing, and a replay after a
crash between the manifest append and the writer-state update appends a second copy that readers drop
(the sink's entry tag, docs/adr/0002)."""

from __future__ import annotations

import pathlib

import pytest

pytest.importorskip("pyarrow", reason="osqueue.spark_source needs pyarrow (osqueue[spark])")

import osqueue  # noqa: E402
from osqueue.spark_source.options import SinkOptions  # noqa: E402
from osqueue.spark_source.writer import SinkCommitter, state_key, write_task  # noqa: E402


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
