"""Retention and size caps across languages (docs/format.md §2.3, ADR 0005): a policy Python sets is
applied by a JVM producer's appends, and a cut either language's writer makes is reported, with the exact
count, by the other language's consumer of a lagging subscription. Nothing else is lost."""

from __future__ import annotations

import pathlib

from osqueue import Consumer, Producer
from osqueue.errors import DataLossError
from osqueue.format.manifest_head import parse_head
from osqueue.queue.queue_retention import QueueRetention
from osqueue.queue.subscriptions import Subscriptions
from osqueue.store import open_store

from . import jvm_tool

KEY = "ingest/manifest"


def _head(path: str):  # type: ignore[no-untyped-def]
    store = open_store(path)
    try:
        return parse_head(store.get(KEY).data, KEY)
    finally:
        store.close()


def _jvm_consume(path: str, subscription: str) -> tuple[list[tuple[int, int]], list[str]]:
    """The JVM consumer of ``subscription`` (failOnDataLoss=false): the lost ranges it reported, its values."""
    out = jvm_tool.run("consume", path, "--subscription", subscription, "--fail-on-data-loss", "false")
    lost, values = [], []
    for line in out.splitlines():
        fields = line.split("\t")
        if fields[0] == "lost":
            lost.append((int(fields[1]), int(fields[2])))
        else:
            values.append(fields[2])
    return lost, values


def test_drop_oldest_cuts_and_data_loss_reports_agree_across_languages(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "q")
    with Producer(path, flush_interval=3600) as p:
        for i in range(2):
            p.produce([f"py-{i}".encode()])
            p.flush(timeout=30)
    store = open_store(path)
    subs = Subscriptions(store, KEY)
    subs.create("jvm-reader")
    subs.create("py-reader")
    QueueRetention(store, KEY).set(max_entries=4, policy="drop_oldest")
    store.close()

    # A JVM producer appends 6 under Python's policy: its appends cut the oldest, so 4 entries stay.
    jvm_tool.run("produce", path, "jvm", "6", "--sync", "true", "--flush-ms", "0")
    head = _head(path)
    assert (head.first_sequence, head.next_sequence) == (4, 8)

    # The JVM reader of a subscription at 0 reports [0, 4) lost, exactly, then reads the rest.
    lost, values = _jvm_consume(path, "jvm-reader")
    assert lost == [(0, 4)] and values == [f"jvm-{i}" for i in range(2, 6)]

    # Python's appends cut past the JVM reader's position (8): it reports [8, 10), and nothing else.
    with Producer(path, flush_interval=3600) as p:
        for i in range(2, 8):
            p.produce([f"py-{i}".encode()])
            p.flush(timeout=30)
    lost, values = _jvm_consume(path, "jvm-reader")
    assert lost == [(8, 2)] and values == [f"py-{i}" for i in range(4, 8)]

    # The Python reader (never read) was behind both languages' cuts: one report of everything cut.
    losses: list[DataLossError] = []
    c = Consumer(path, subscription="py-reader", fail_on_data_loss=False, on_data_loss=losses.append, run_gc=False)
    got = []
    while (b := c.next_batch()) is not None:
        got += [v.decode() for v in b.entries]
        c.ack(b.sequence)
    c.close()
    assert [(e.first, e.count) for e in losses] == [(0, 10)]
    assert got == [f"py-{i}" for i in range(4, 8)]
    assert _head(path).depth == 0  # both readers passed everything: gone
