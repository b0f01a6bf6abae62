"""The queue end to end on azurite: producer processes, one consumer reading everything exactly
once, fencing by a second consumer, and the CLI with the same fs.azure.* keys."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from osqueue.consumer import Consumer
from osqueue.errors import FencedError

from .support import Azurite

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[2] / "python"

_PRODUCER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from osqueue.producer import Producer
    uri, options, tag, count = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    with Producer(uri, store_options=options, flush_interval=0.02) as producer:
        handles = [producer.produce([f"{tag}-{i}".encode()]) for i in range(count)]
        for h in handles:
            h.wait_durable(120)
    print(json.dumps({"done": count}))
    """
)


def test_two_producer_processes_then_one_consumer_reads_each_entry_once_and_a_second_fences_it(
    azurite: Azurite, container: str
) -> None:
    uri = azurite.uri(container, "team/events")
    options = json.dumps(azurite.options)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PRODUCER, str(PYTHON_DIR), uri, options, f"p{n}", "500"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1]) == {"done": 500}

    seen: list[str] = []
    first = Consumer(uri, store_options=azurite.options)
    try:
        while len(seen) < 600:
            batch = first.next_batch()
            assert batch is not None
            seen.extend(e.decode() for e in batch.entries)
            first.ack(batch.sequence)
        first.flush()
        # A second consumer takes over: the first is fenced, and the second resumes after the first's flushed ack.
        second = Consumer(uri, store_options=azurite.options)
        assert second.epoch == first.epoch + 1
        with pytest.raises(FencedError):
            while True:  # entries it already holds are handed out; its next manifest read finds the fence
                batch = first.next_batch()
                first.ack(batch.sequence)  # type: ignore[union-attr]
    finally:
        first.close()
    rest: list[str] = []
    with second:
        while (batch := second.next_batch()) is not None:
            rest.extend(e.decode() for e in batch.entries)
            second.ack(batch.sequence)
    # Exactly once across the handover: what the first acked and flushed is never read again.
    assert sorted(seen + rest) == sorted(f"p{n}-{i}" for n in range(2) for i in range(500))
    assert len(seen) + len(rest) == 1000


def test_cli_takes_the_fs_azure_keys(azurite: Azurite, container: str) -> None:
    uri = azurite.uri(container, "cli")
    opts = [arg for k, v in azurite.options.items() for arg in ("--store-option", f"{k}={v}")]

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "osqueue", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PYTHONPATH": str(PYTHON_DIR), "PATH": "/usr/bin:/bin"},
        )

    produced = cli("produce", uri, *opts, "-q", stdin="a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr
    tailed = cli("tail", uri, *opts, "--ack")
    assert tailed.returncode == 0 and tailed.stdout.split() == ["a", "b", "c"], tailed.stderr
    assert cli("tail", uri, *opts).stdout == ""  # acked and dequeued
    bad = cli("inspect", uri, "--store-option", "fs.azure.blob.endpoint=nope")
    assert bad.returncode != 0 and "fs.azure.blob.endpoint" in bad.stderr, bad.stderr
