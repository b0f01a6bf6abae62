"""Path safety (issue 6): a manifest cannot make the Python consumer read, or GC delete, anything
outside the queue root / the data prefix. Every relative escape target holds a VALID batch, so a
read through the hostile key would have succeeded: the InvalidObjectKey error proves it was not.
(The JVM side is jvm/core/src/test/scala/osqueue/consumer/PathSafetySuite.scala.)"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

from osqueue import Consumer  # noqa: E402
from osqueue.errors import InvalidObjectKeyError  # noqa: E402
from osqueue.format import Compression, append_entries, empty_manifest, encode_batch, new_batch_key  # noqa: E402
from osqueue.gc import GarbageCollector  # noqa: E402
from osqueue.store import LocalFileSystemStore  # noqa: E402

T0 = 1767225600000
VALID = encode_batch([b"stolen"], Compression.NONE)

HOSTILE = [
    "../../etc/passwd",
    "/etc/passwd",
    "s3://other-bucket/x",
    "ingest/../../x",
    "ingest/../../../outside.batch",
    "./ingest/x.batch",
    "ingest//x.batch",
    "ingest\\..\\..\\x",
]


class _Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now_ms(self) -> int:
        return self.ms

    def monotonic(self) -> float:
        import time

        return time.monotonic()

    def sleep(self, s: float) -> None:
        import time

        time.sleep(s)


@pytest.fixture
def dirs(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    root = tmp_path / "a" / "b" / "queue"
    root.mkdir(parents=True)
    for rel in ("../../etc/passwd", "../x", "../../outside.batch"):
        target = pathlib.Path(os.path.normpath(root / rel))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(VALID)
    return tmp_path, root


@pytest.mark.parametrize("location", HOSTILE)
def test_consumer_rejects_entries_pointing_outside_the_root(dirs, location: str) -> None:
    _, root = dirs
    store = LocalFileSystemStore(root)
    raw, _ = append_entries(empty_manifest(), [(location, [])], "m")
    store.put("ingest/manifest", raw)
    consumer = Consumer(store=store)
    # As on the JVM (InvalidObjectKeyException): the key-validation error itself, naming the key.
    with pytest.raises(InvalidObjectKeyError) as info:
        consumer.next_batch()
    assert info.value.key == location
    assert (pathlib.Path(os.path.normpath(root / "../../etc/passwd"))).read_bytes() == VALID


def test_gc_deletes_only_batches_directly_under_the_prefix(dirs) -> None:
    base, root = dirs
    store = LocalFileSystemStore(root)
    clock = _Clock(T0)
    orphan = new_batch_key("ingest", clock)
    store.put(orphan, VALID)
    later = new_batch_key("ingest", _Clock(T0 + 86_400_000))
    store.put(later, VALID)
    outside_prefix = new_batch_key("other", clock)
    in_sub = new_batch_key("ingest/sub", clock)
    sibling = new_batch_key("ingest2", clock)
    for k in (outside_prefix, in_sub, sibling):
        store.put(k, VALID)
    outside = base / "outside"
    outside.mkdir()
    outside_file = outside / new_batch_key("", clock)
    outside_file.write_bytes(VALID)
    (root / "ingest" / "link").symlink_to(outside, target_is_directory=True)
    file_link = root / "ingest" / new_batch_key("", clock)
    file_link.symlink_to(outside_file)
    raw, _ = append_entries(empty_manifest(), [(later, [])], "m")
    store.put("ingest/manifest", raw)
    # GC ages files by their mtime against the manifest's: every file but the manifest is a day old.
    day_ago = time.time() - 86_400
    for k in (orphan, later, outside_prefix, in_sub, sibling):
        os.utime(root / k, (day_ago, day_ago))
    os.utime(outside_file, (day_ago, day_ago))

    result = GarbageCollector(store, grace_period=600, clock=_Clock(T0 + 10 * 86_400_000)).run_once()
    assert result.deleted == (orphan,), result
    assert store.get(orphan) is None
    for k in (later, outside_prefix, in_sub, sibling):
        assert store.get(k) is not None, k
    assert outside_file.read_bytes() == VALID
    assert file_link.is_symlink() and (root / "ingest" / "link").is_symlink()
