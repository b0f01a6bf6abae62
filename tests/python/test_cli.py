"""The ``osqueue`` command line, on real local queues (and one in moto's S3).

Each command runs in-process through click's CliRunner and at least once as a real
``python -m osqueue`` subprocess.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

pytest.importorskip("rich", reason="the osqueue CLI needs rich (a dependency of osqueue)")

from click.testing import CliRunner, Result  # noqa: E402
from helpers import T0_MS, ManualClock  # noqa: E402

from osqueue.cli import cli  # noqa: E402
from osqueue.format import (  # noqa: E402
    EntryTag,
    Manifest,
    ManifestEntry,
    MetadataItem,
    decode_batch,
    decode_manifest,
    encode_batch,
    encode_manifest,
    encode_ulid,
)
from osqueue.format.batch_integrity import record as integrity_record  # noqa: E402
from osqueue.format.manifest_codec import encode_entry  # noqa: E402
from osqueue.producer import DurableWrite, Producer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = "ingest/manifest"


# -- helpers ------------------------------------------------------------------------------------


def run(*args: str, input: bytes | str | None = None) -> Result:
    """The CLI in-process; stdout and stderr kept apart."""
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def run_process(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """``python -m osqueue`` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "osqueue", *args],
        input=input if input is not None else b"",
        capture_output=True,
        timeout=timeout,
        env=_env(),
        cwd=str(ROOT),
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
    env.pop("COLUMNS", None)
    return env


def _interruptible() -> None:
    """Starts the CLI with Ctrl-C's default action, as a terminal does. Run as a background job of a
    script (the full run's native lane), a child starts with SIGINT ignored, and Python then keeps it
    ignored: the Ctrl-C tests would test nothing but a hang."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def make_queue(root: pathlib.Path, batches: list[list[tuple[list[bytes], bytes]]]) -> list[DurableWrite]:
    """A queue at ``root`` with one batch per element of ``batches`` (each a list of
    ``produce(entries, metadata)`` calls), ingestion times and ULIDs from a manual clock at T0_MS."""
    clock = ManualClock()
    results: list[DurableWrite] = []
    with Producer(str(root), flush_interval=3600, clock=clock) as producer:
        for calls in batches:
            handles = [producer.produce(entries, meta) for entries, meta in calls]
            producer.flush(timeout=30)
            results.extend(h.wait_durable(30) for h in handles)
            clock.advance(1)
    return results


def manifest_bytes(root: pathlib.Path) -> bytes:
    return (root / "ingest" / "manifest").read_bytes()


def one_error_line(stderr: str, *needles: str) -> None:
    """stderr is exactly one ``osqueue: error: ...`` line mentioning every needle."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("osqueue: error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], stderr


@pytest.fixture
def queue(tmp_path: pathlib.Path) -> tuple[pathlib.Path, list[DurableWrite]]:
    """Three batches: [a, b] (metadata m0) + [c] (m1); [d] (m2); [e, f] (m3)."""
    root = tmp_path / "q"
    results = make_queue(
        root,
        [
            [([b"a", b"b"], b"m0"), ([b"c"], b"m1")],
            [([b"d"], b"m2")],
            [([b"e", b"f"], b"m3")],
        ],
    )
    return root, results


# -- inspect --------------------------------------------------------------------------------------


def _expected_json(results: list[DurableWrite], epoch: int, root: pathlib.Path) -> dict[str, Any]:
    loc = [results[0].location, results[2].location, results[3].location]

    def item(start: int, t: int, payload: bytes) -> dict[str, Any]:
        return {"start_index": start, "ingestion_time_ms": t, "payload_base64": base64.b64encode(payload).decode()}

    def ext(seq: int, metas: list[MetadataItem]) -> str:
        """The entry-integrity record of the batch (docs/format.md §2.1), its entry_crc32 computed."""
        rec = integrity_record((root / loc[seq]).read_bytes())
        return base64.b64encode(encode_entry(seq, loc[seq], metas, rec)[-len(rec) :]).decode()

    return {
        "version": 1,
        "epoch": epoch,  # the producer created the manifest: a fresh incarnation, no consumer yet
        "next_sequence": 3,
        "entries": [
            {
                "sequence": 0,
                "location": loc[0],
                "metadata": [item(0, T0_MS, b"m0"), item(2, T0_MS, b"m1")],
                "extension_base64": ext(0, [MetadataItem(0, T0_MS, b"m0"), MetadataItem(2, T0_MS, b"m1")]),
            },
            {
                "sequence": 1,
                "location": loc[1],
                "metadata": [item(0, T0_MS + 1000, b"m2")],
                "extension_base64": ext(1, [MetadataItem(0, T0_MS + 1000, b"m2")]),
            },
            {
                "sequence": 2,
                "location": loc[2],
                "metadata": [item(0, T0_MS + 2000, b"m3")],
                "extension_base64": ext(2, [MetadataItem(0, T0_MS + 2000, b"m3")]),
            },
        ],
    }


def test_inspect_json_dumps_the_manifest_exactly(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, results = queue
    assert results[0].location == results[1].location  # a, b and c share the first batch
    result = run("inspect", str(root), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == _expected_json(
        results, decode_manifest(manifest_bytes(root), MANIFEST).epoch, root
    )
    assert result.stderr == ""


def test_inspect_json_carries_each_entrys_extension_bytes(tmp_path: pathlib.Path) -> None:
    tag = EntryTag("query-1", 7, "01JATTEMPT").encode()  # what the Spark sink appends
    other = bytes(range(256))  # an extension osqueue does not interpret: still dumped as is
    entries = [
        ManifestEntry(4, "ingest/a.batch", [MetadataItem(0, T0_MS, b"m")], tag),
        ManifestEntry(5, "ingest/b.batch", [MetadataItem(0, T0_MS + 1, b"")], other),
        ManifestEntry(6, "ingest/c.batch", [], b""),
    ]
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "manifest").write_bytes(encode_manifest(Manifest(entries, next_sequence=7, epoch=3)))
    result = run("inspect", str(tmp_path), "--json")
    assert result.exit_code == 0, result.stderr
    dumped = json.loads(result.stdout)["entries"]
    assert [base64.b64decode(e["extension_base64"]) for e in dumped] == [tag, other, b""]
    assert EntryTag.decode(base64.b64decode(dumped[0]["extension_base64"])) == EntryTag("query-1", 7, "01JATTEMPT")
    assert [(e["sequence"], e["location"]) for e in dumped] == [
        (4, "ingest/a.batch"),
        (5, "ingest/b.batch"),
        (6, "ingest/c.batch"),
    ]


def test_inspect_json_in_a_subprocess(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, results = queue
    proc = run_process("inspect", f"file:{root}", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == _expected_json(
        results, decode_manifest(manifest_bytes(root), MANIFEST).epoch, root
    )


def test_inspect_table(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, results = queue
    orphan = root / "ingest" / f"{encode_ulid(T0_MS - 86_400_000, 1)}.batch"
    orphan.write_bytes(encode_batch([b"lost"]))
    referenced = {r.location for r in results}
    queued = sum((root / loc).stat().st_size for loc in referenced)
    result = run("inspect", str(root))
    assert result.exit_code == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│|").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    assert rows["entries"] == "3"
    assert rows["sequences"] == "0..2"
    assert rows["next sequence"] == "3"
    assert rows["epoch"] == str(decode_manifest(manifest_bytes(root), MANIFEST).epoch)
    assert rows["queued bytes"].startswith(f"{queued} (")
    assert rows["oldest entry"].startswith("2026-01-01T00:00:00.000Z (age ")
    assert rows["newest entry"].startswith("2026-01-01T00:00:02.000Z (age ")
    assert rows["unreferenced batches"].startswith("1 under ingest/")
    assert rows["manifest"].startswith("ingest/manifest (") and "format version 1" in rows["manifest"]


def test_inspect_a_directory_without_a_manifest(tmp_path: pathlib.Path) -> None:
    result = run("inspect", str(tmp_path), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"version": None, "epoch": 0, "next_sequence": 0, "entries": []}
    table = run("inspect", str(tmp_path))
    assert table.exit_code == 0
    assert "missing: an empty queue" in table.stdout
    assert not (tmp_path / "ingest").exists()  # reading writes nothing


def test_inspect_with_other_manifest_path_and_data_prefix(tmp_path: pathlib.Path) -> None:
    with Producer(str(tmp_path), manifest_path="q/m", data_path_prefix="q/data", flush_interval=3600) as p:
        p.produce([b"x"])
    result = run("inspect", str(tmp_path), "--manifest-path", "q/m", "--data-prefix", "q/data", "--json")
    assert result.exit_code == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert len(manifest["entries"]) == 1 and manifest["entries"][0]["location"].startswith("q/data/")
    default = run("inspect", str(tmp_path), "--json")
    assert json.loads(default.stdout)["entries"] == []  # nothing at ingest/manifest


# -- produce and tail -----------------------------------------------------------------------------


def test_produce_from_stdin_then_tail_shows_the_lines_in_order(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    lines = [f"line {i}" for i in range(25)] + ["", "ünïcode"]
    result = run("produce", str(root), "--batch-size", "10", input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("27 entries durable in ")
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    tail = run("tail", str(root))
    assert tail.exit_code == 0, tail.stderr
    assert tail.stdout.split("\n")[:-1] == lines
    manifest = decode_manifest(manifest_bytes(root), MANIFEST)
    items = [m for e in manifest.entries for m in e.metadata]
    assert len(items) == 3  # 10 + 10 + 7 entries per produce() call


def test_produce_in_a_subprocess_with_metadata_and_zstd(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    proc = run_process(
        "produce", str(root), "--metadata", "src=test", "--compression", "zstd", input=b"one\r\ntwo\nthree"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == "3 entries durable in 1 batch (sequences 0..0)\n"
    manifest = decode_manifest(manifest_bytes(root), MANIFEST)
    (entry,) = manifest.entries
    assert [(m.start_index, m.payload) for m in entry.metadata] == [(0, b"src=test")]
    data = (root / entry.location).read_bytes()
    assert data[-7] == 1  # zstd
    assert decode_batch(data, entry.location) == [b"one", b"two", b"three"]


def test_produce_from_files_and_whole_files(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    f1, f2 = tmp_path / "f1.txt", tmp_path / "f2.bin"
    f1.write_bytes(b"x1\nx2\n")
    f2.write_bytes(b"y1\n\xff\xfe\n")
    result = run("produce", str(root), str(f1), str(f2))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("4 entries durable in 1 batch")
    whole = run("produce", str(root), "--whole-files", str(f1), str(f2))
    assert whole.exit_code == 0, whole.stderr
    assert whole.stdout.startswith("2 entries durable in 1 batch (sequences 1..1)")
    tail = run("tail", str(root))
    assert tail.stdout == "x1\nx2\ny1\n\\xff\\xfe\nx1\nx2\n\ny1\n\\xff\\xfe\n\n"
    js = run("tail", str(root), "--format", "json")
    records = [json.loads(line) for line in js.stdout.splitlines()]
    assert [(r["sequence"], r["index"], base64.b64decode(r["value_base64"])) for r in records] == [
        (0, 0, b"x1"),
        (0, 1, b"x2"),
        (0, 2, b"y1"),
        (0, 3, b"\xff\xfe"),
        (1, 0, b"x1\nx2\n"),
        (1, 1, b"y1\n\xff\xfe\n"),
    ]
    assert all(r["metadata_base64"] == "" and r["ingestion_time_ms"] > 0 for r in records)


def test_produce_nothing(tmp_path: pathlib.Path) -> None:
    result = run("produce", str(tmp_path / "q"), input="")
    assert result.exit_code == 0
    assert result.stdout == "nothing to produce: the input was empty\n"


def test_tail_without_ack_leaves_the_manifest_byte_identical(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, _ = queue
    before = manifest_bytes(root)
    files_before = sorted(p.name for p in (root / "ingest").iterdir())
    result = run("tail", str(root))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "a\nb\nc\nd\ne\nf\n"
    proc = run_process("tail", str(root), "--max-batches", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"a\nb\nc\nd\n"
    assert manifest_bytes(root) == before
    assert sorted(p.name for p in (root / "ingest").iterdir()) == files_before


def test_tail_json_format(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, results = queue
    result = run("tail", str(root), "--format", "json", "--max-batches", "1")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    assert records == [
        {
            "sequence": 0,
            "index": i,
            "value_base64": b64(v),
            "metadata_base64": b64(m),
            "ingestion_time_ms": T0_MS,
            "location": results[0].location,
        }
        for i, (v, m) in enumerate([(b"a", b"m0"), (b"b", b"m0"), (b"c", b"m1")])
    ]


def test_tail_ack_dequeues_what_it_printed(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, _ = queue
    first = run("tail", str(root), "--ack", "--max-batches", "2")
    assert first.exit_code == 0, first.stderr
    assert first.stdout == "a\nb\nc\nd\n"
    assert "dequeued through sequence 1" in first.stderr
    manifest = decode_manifest(manifest_bytes(root), MANIFEST)
    assert [e.sequence for e in manifest.entries] == [2]
    assert manifest.epoch & 0xFFFFFFFF == 1  # tail --ack took the queue over as its consumer
    proc = run_process("tail", str(root), "--ack")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"e\nf\n"
    manifest = decode_manifest(manifest_bytes(root), MANIFEST)
    assert manifest.entries == [] and manifest.next_sequence == 3 and manifest.epoch & 0xFFFFFFFF == 2
    assert run("tail", str(root)).stdout == ""


def test_tail_follow_picks_up_new_batches(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "q"
    make_queue(root, [[([b"first"], b"")]])
    proc = subprocess.Popen(
        [sys.executable, "-m", "osqueue", "tail", str(root), "--follow", "--interval", "0.05", "--max-batches", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=_interruptible,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"first\n"
        with Producer(str(root), flush_interval=3600) as p:
            p.produce([b"second"])
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == b"second\n"


def test_tail_follow_stops_cleanly_on_ctrl_c(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, _ = queue
    before = manifest_bytes(root)
    proc = subprocess.Popen(
        [sys.executable, "-m", "osqueue", "tail", str(root), "--follow", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=_interruptible,
    )
    try:
        assert proc.stdout is not None
        got = b"".join(proc.stdout.readline() for _ in range(6))
        assert got == b"a\nb\nc\nd\ne\nf\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    assert manifest_bytes(root) == before


def test_tail_ack_follow_dequeues_on_ctrl_c(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, _ = queue
    proc = subprocess.Popen(
        [sys.executable, "-m", "osqueue", "tail", str(root), "--ack", "--follow", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        preexec_fn=_interruptible,
    )
    try:
        assert proc.stdout is not None
        got = b"".join(proc.stdout.readline() for _ in range(6))
        assert got == b"a\nb\nc\nd\ne\nf\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert b"dequeued through sequence 2" in err
    assert decode_manifest(manifest_bytes(root), MANIFEST).entries == []


# -- gc -------------------------------------------------------------------------------------------


def test_gc_dry_run_then_apply(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, results = queue
    data = root / "ingest"
    old = f"{encode_ulid(T0_MS - 86_400_000, 7)}.batch"  # older than every referenced batch
    newer = f"{encode_ulid(T0_MS + 3_600_000, 8)}.batch"  # unreferenced, but newer than the oldest one
    for name in (old, newer, "notes.txt"):
        (data / name).write_bytes(b"orphan")
    written_s = (T0_MS - 86_400_000) / 1000  # GC ages files by their mtime, the store's clock
    os.utime(data / old, (written_s, written_s))
    before = manifest_bytes(root)

    dry = run("gc", str(root))
    assert dry.exit_code == 0, dry.stderr
    assert dry.stdout.splitlines()[0].startswith("would delete 1 unreferenced batch file ")
    assert f"  ingest/{old}  (age " in dry.stdout
    assert (
        "kept: 3 referenced by the manifest, 1 not older than the oldest referenced batch, "
        "0 within the grace period, 2 other files under ingest/ (not <ULID>.batch) besides the manifest"
    ) in dry.stdout
    assert "dry run: nothing was deleted" in dry.stdout
    assert (data / old).exists()

    # A grace period longer than the file's age keeps it.
    age_s = (int(time.time() * 1000) - (T0_MS - 86_400_000)) / 1000
    graced = run("gc", str(root), "--grace-period", str(int(age_s + 3600)))
    assert "would delete 0 unreferenced batch files" in graced.stdout
    assert "1 within the grace period" in graced.stdout

    proc = run_process("gc", str(root), "--apply")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.startswith("deleted 1 unreferenced batch file ")
    assert f"ingest/{old}" in out and "dry run" not in out
    assert not (data / old).exists()
    assert (data / newer).exists() and (data / "notes.txt").exists()
    assert all((root / r.location).exists() for r in results)
    assert manifest_bytes(root) == before


# -- errors ---------------------------------------------------------------------------------------


def test_relative_paths_are_taken_from_the_working_directory(
    queue: tuple[pathlib.Path, list[DurableWrite]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, results = queue
    monkeypatch.chdir(root.parent)
    inspected = run("inspect", "--json", root.name)
    assert inspected.exit_code == 0, inspected.stderr
    assert json.loads(inspected.stdout)["next_sequence"] == results[-1].sequence + 1
    dotted = run("inspect", "--json", f"./{root.name}/../{root.name}")
    assert dotted.exit_code == 0 and json.loads(dotted.stdout) == json.loads(inspected.stdout)
    missing = run("inspect", "relative/dir")
    assert missing.exit_code == 2
    one_error_line(missing.stderr, "does not exist", str(root.parent / "relative" / "dir"))
    produced = run("produce", "made/here", input="x\n")
    assert produced.exit_code == 0, produced.stderr
    assert (root.parent / "made" / "here" / "ingest" / "manifest").is_file()


@pytest.mark.parametrize("command", ["inspect", "tail", "gc"])
def test_bad_paths_are_one_line_and_exit_2(command: str, tmp_path: pathlib.Path) -> None:
    unknown_scheme = run(command, "hdfs://nn/queue")
    assert unknown_scheme.exit_code == 2
    one_error_line(unknown_scheme.stderr, "invalid value for 'path'", "hdfs://nn/queue")
    missing = tmp_path / "nope"
    absent = run(command, str(missing))
    assert absent.exit_code == 2
    one_error_line(absent.stderr, "does not exist")
    assert not missing.exists()  # a read-only command creates nothing
    no_bucket = run(command, "s3://")
    assert no_bucket.exit_code == 2
    one_error_line(no_bucket.stderr, "bucket")


def test_produce_to_bad_paths_is_one_line_and_exit_2(tmp_path: pathlib.Path) -> None:
    # produce creates a missing queue directory (it is the writer), so "missing" is not an error here;
    # a root that cannot be a directory is.
    unknown_scheme = run("produce", "hdfs://nn/queue", input="x\n")
    assert unknown_scheme.exit_code == 2
    one_error_line(unknown_scheme.stderr, "invalid value for 'path'", "hdfs://nn/queue")
    no_bucket = run("produce", "s3://", input="x\n")
    assert no_bucket.exit_code == 2
    one_error_line(no_bucket.stderr, "bucket")
    a_file = tmp_path / "file"
    a_file.write_bytes(b"not a directory")
    under_file = run("produce", str(a_file / "q"), input="x\n")
    assert under_file.exit_code == 2
    one_error_line(under_file.stderr, "cannot create store root", str(a_file / "q"))
    proc = run_process("produce", "ftp://host/dir", input=b"x\n")
    assert proc.returncode == 2 and proc.stdout == b""
    one_error_line(proc.stderr.decode(), "ftp://host/dir")
    assert a_file.read_bytes() == b"not a directory"


def test_bad_path_in_a_subprocess() -> None:
    proc = run_process("inspect", "ftp://host/dir")
    assert proc.returncode == 2
    one_error_line(proc.stderr.decode(), "ftp://host/dir")
    assert proc.stdout == b""


@pytest.mark.parametrize(
    "command", [["inspect"], ["inspect", "--json"], ["tail"], ["tail", "--ack"], ["gc"], ["produce"]]
)
def test_corrupt_manifest_is_one_line_naming_the_manifest(command: list[str], tmp_path: pathlib.Path) -> None:
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "manifest").write_bytes(b"garbage")
    result = run(command[0], str(tmp_path), *command[1:], input="x\n")
    assert result.exit_code == 2, result.stdout
    one_error_line(result.stderr, "ingest/manifest", "corrupt")
    assert (tmp_path / "ingest" / "manifest").read_bytes() == b"garbage"


def test_corrupt_manifest_in_a_subprocess(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ingest").mkdir()
    (tmp_path / "ingest" / "manifest").write_bytes(b"\x00" * 30)
    proc = run_process("inspect", str(tmp_path))
    assert proc.returncode == 2
    one_error_line(proc.stderr.decode(), "ingest/manifest")
    debug = run_process("--debug", "inspect", str(tmp_path))
    assert debug.returncode == 2
    assert b"Traceback" in debug.stderr and debug.stderr.decode().splitlines()[-1].startswith("osqueue: error: ")


def test_missing_batch_is_an_error(queue: tuple[pathlib.Path, list[DurableWrite]]) -> None:
    root, results = queue
    (root / results[2].location).unlink()
    result = run("tail", str(root))
    assert result.exit_code == 2
    assert result.stdout == "a\nb\nc\n"
    one_error_line(result.stderr, results[2].location, "does not exist")


def test_unexpected_errors_exit_1_with_one_line(
    queue: tuple[pathlib.Path, list[DurableWrite]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from osqueue.queue import ManifestStore

    def boom(self: Any) -> Any:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(ManifestStore, "read_raw", boom)
    result = run("inspect", str(queue[0]))
    assert result.exit_code == 1
    one_error_line(result.stderr, "unexpected RuntimeError: boom second line")


def test_bad_store_option_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    result = run("inspect", str(tmp_path), "--store-option", "novalue")
    assert result.exit_code == 2
    assert "KEY=VALUE" in result.stderr


def test_version() -> None:
    from osqueue import __version__

    proc = run_process("--version")
    assert proc.returncode == 0
    assert __version__ in proc.stdout.decode()


# -- S3 -------------------------------------------------------------------------------------------


def _s3_args(s3_endpoint: dict[str, str]) -> list[str]:
    return [
        "--store-option",
        f"fs.s3a.endpoint={s3_endpoint['endpoint']}",
        "--store-option",
        f"fs.s3a.endpoint.region={s3_endpoint.get('region', 'us-east-1')}",
        "--store-option",
        f"fs.s3a.access.key={s3_endpoint.get('access_key', 'test')}",
        "--store-option",
        f"fs.s3a.secret.key={s3_endpoint.get('secret_key', 'test')}",
        "--store-option",
        "fs.s3a.path.style.access=true",
    ]


def test_s3_queue_end_to_end(s3_endpoint: dict[str, str], s3_bucket: str) -> None:
    path = f"s3a://{s3_bucket}/queues/cli"
    opts = _s3_args(s3_endpoint)
    proc = run_process("produce", path, *opts, "--batch-size", "2", input=b"s1\ns2\ns3\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"3 entries durable in ")
    manifest = json.loads(run("inspect", path, *opts, "--json").stdout)
    assert manifest["version"] == 1 and manifest["next_sequence"] >= 1
    assert all(e["location"].startswith("ingest/") for e in manifest["entries"])
    table = run("inspect", path, *opts)
    assert table.exit_code == 0, table.stderr
    assert f"osqueue s3://{s3_bucket}/queues/cli" in table.stdout
    assert run("tail", path, *opts).stdout == "s1\ns2\ns3\n"
    gc = run("gc", path, *opts)
    assert gc.exit_code == 0 and "would delete 0" in gc.stdout
    acked = run("tail", path, *opts, "--ack")
    assert acked.stdout == "s1\ns2\ns3\n"
    assert json.loads(run("inspect", path, *opts, "--json").stdout)["entries"] == []


def test_s3_missing_bucket_and_unreachable_endpoint(s3_endpoint: dict[str, str]) -> None:
    opts = _s3_args(s3_endpoint)
    missing = run("inspect", "s3://osq-no-such-bucket-for-cli/q", *opts)
    assert missing.exit_code == 2
    one_error_line(missing.stderr, "ingest/manifest")
    unreachable = [o.replace(s3_endpoint["endpoint"], "http://127.0.0.1:9") for o in opts]
    proc = run_process("inspect", "s3://bucket/q", *unreachable)
    assert proc.returncode == 2
    one_error_line(proc.stderr.decode(), "127.0.0.1:9")


def test_gc_apply_with_a_manifest_path_that_holds_no_manifest_deletes_nothing(
    queue: tuple[pathlib.Path, list[DurableWrite]],
) -> None:
    root, _ = queue
    batches = sorted(p.name for p in (root / "ingest").glob("*.batch"))
    assert len(batches) == 3
    result = run("gc", str(root), "--manifest-path", "elsewhere/manifest", "--grace-period", "0", "--apply")
    assert result.exit_code == 2
    assert "no manifest at 'elsewhere/manifest'" in result.stderr
    assert sorted(p.name for p in (root / "ingest").glob("*.batch")) == batches, "GC deleted the queue's batches"
