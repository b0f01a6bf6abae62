"""GCS (gs://) on fake-gcs-server: the store contract and queue concurrency tests of test_store.py and
test_queue.py, ambiguous outcomes, the fs.gs.* options, the probe, and the acceptance run
(2 producer processes x 500 entries, one consumer, a second consumer fencing the first)."""

from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "gcs"))
pytest.importorskip("google.cloud.storage")

from gcs_fixtures import gcs_bucket, gcs_options, gcs_server  # noqa: E402,F401  (fixtures)
from helpers import WrappedStore, assert_well_formed, lost_reply_hook, lying_precondition_hook  # noqa: E402
from test_queue import test_eight_threads_append_to_one_manifest  # noqa: E402,F401  (run here on GCS)
from test_store import test_store_contract  # noqa: E402,F401  (run here on GCS)

from osqueue.consumer import Consumer  # noqa: E402
from osqueue.errors import ConditionalWritesNotHonouredError, FencedError, InvalidConfigError, StoreError  # noqa: E402
from osqueue.producer import Producer  # noqa: E402
from osqueue.queue import QueueProducer, RetryPolicy  # noqa: E402
from osqueue.store import PRECONDITION_FAILED, ObjectVersion, Written, forget_endpoint_conditions, open_store  # noqa: E402
from osqueue.store.gcs_store import GcsStore  # noqa: E402

KEY = "ingest/manifest"


@pytest.fixture
def any_store(gcs_bucket: str, gcs_options: dict[str, str]) -> Iterator[Any]:
    """The contract tests imported above run against GCS only in this module."""
    store = open_store(f"gs://{gcs_bucket}/queues/q1", gcs_options)
    yield store
    store.close()


def test_gs_uris_open_through_the_plugged_store_with_spark_hadoop_keys_too(
    gcs_bucket: str, gcs_options: dict[str, str]
) -> None:
    prefixed = {f"spark.hadoop.{k}": v for k, v in gcs_options.items()}
    for i, options in enumerate((gcs_options, prefixed)):
        store = open_store(f"gs://{gcs_bucket}/team/q{i}", options)
        assert isinstance(store, GcsStore) and store.uri == f"gs://{gcs_bucket}/team/q{i}"
        first = store.put_if_absent("m", b"1")
        assert isinstance(first, Written)
        assert isinstance(store.put_if_version_matches("m", b"2", first.version), Written)
        assert store.put_if_version_matches("m", b"3", first.version) is PRECONDITION_FAILED
        assert store.put_if_version_matches("m", b"3", ObjectVersion('"an-etag"')) is PRECONDITION_FAILED
    client = GcsStore(gcs_bucket, "", gcs_options).client
    assert sorted(b.name for b in client.list_blobs(gcs_bucket)) == ["team/q0/m", "team/q1/m"]  # no probe left behind


@pytest.mark.parametrize(
    "options, option",
    [
        ({"fs.gs.auth.type": "USER_CREDENTIALS"}, "fs.gs.auth.type"),
        ({"fs.gs.auth.type": "SERVICE_ACCOUNT_JSON_KEYFILE"}, "fs.gs.auth.service.account.json.keyfile"),
        ({"fs.gs.auth.service.account.json.keyfile": "/no/such/key.json"}, "fs.gs.auth.service.account.json.keyfile"),
        ({"fs.gs.auth.service.account.email": "sa@p"}, "fs.gs.auth.service.account.private.key"),
        ({"fs.gs.auth.access.token.provider.impl": "com.example.Tokens"}, "fs.gs.auth.access.token.provider.impl"),
        ({"fs.gs.storage.root.url": "ftp://x"}, "fs.gs.storage.root.url"),
        ({"fs.gs.storage.service.path": "storage/v2/"}, "fs.gs.storage.service.path"),
        ({"fs.gs.http.max.retry": "-1"}, "fs.gs.http.max.retry"),
        ({"fs.gs.http.read-timeout": "soon"}, "fs.gs.http.read-timeout"),
    ],
)
def test_bad_fs_gs_options_name_the_option(options: dict[str, str], option: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        open_store("gs://some-bucket/q", options)
    assert info.value.option == option, str(info.value)


@pytest.mark.parametrize("uri", ["gs://", "gs:///q", "gs://UPPER/q", "gs://a/q", "gs://bad bucket/q"])
def test_bad_gs_uris_name_the_path(uri: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        open_store(uri, {"fs.gs.auth.type": "UNAUTHENTICATED"})
    assert info.value.option == "path"


def test_timeouts_and_retries_come_from_the_fs_gs_options() -> None:
    store = GcsStore(
        "b-1",
        "q",
        {
            "fs.gs.auth.type": "UNAUTHENTICATED",
            "fs.gs.http.connect-timeout": "3s",
            "fs.gs.http.read-timeout": "5000",
            "fs.gs.http.max.retry": "0",
        },
    )
    assert store._timeout == (3.0, 5.0) and store._retry is None


def test_an_unreachable_server_is_a_store_error_naming_it() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = GcsStore(
        "b-1",
        "q",
        {
            "fs.gs.auth.type": "UNAUTHENTICATED",
            "fs.gs.storage.root.url": f"http://127.0.0.1:{port}",
            "fs.gs.http.max.retry": "0",
            "fs.gs.http.connect-timeout": "2s",
        },
    )
    with pytest.raises(StoreError) as info:
        store.get("m")
    assert f"127.0.0.1:{port}" in str(info.value) and "GET" in str(info.value)


@pytest.mark.parametrize("fault", ["lost_reply", "lying_precondition"])
def test_concurrent_ambiguous_writes_on_gcs_leave_no_duplicates(
    gcs_bucket: str, gcs_options: dict[str, str], fault: str
) -> None:
    base = GcsStore(gcs_bucket, "queues/q1", gcs_options)
    rng = random.Random(11)
    lock = threading.Lock()

    def flaky() -> bool:
        with lock:
            return rng.random() < 0.3

    errors: list[BaseException] = []

    def work(t: int) -> None:
        store = WrappedStore(GcsStore(gcs_bucket, "queues/q1", gcs_options, client=base.client))
        store.on_conditional = lost_reply_hook(flaky) if fault == "lost_reply" else lying_precondition_hook(flaky)
        qp = QueueProducer(store, KEY, retry=RetryPolicy(base_delay=0.001, max_delay=0.02))
        try:
            for i in range(5):
                qp.enqueue(f"ingest/t{t}-{i}.batch", timeout=60)
        except BaseException as e:  # pragma: no cover
            errors.append(e)
        finally:
            qp.close()

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert sorted(assert_well_formed(base)) == sorted(f"ingest/t{t}-{i}.batch" for t in range(4) for i in range(5))


class _IgnoringPreconditions:
    """A client whose uploads drop if_generation_match: what fake-gcs-server does on simple (media) uploads."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def bucket(self, name: str) -> Any:
        real_bucket = self._real.bucket(name)

        class Bucket:
            def blob(self, blob_name: str, **kw: Any) -> Any:
                blob = real_bucket.blob(blob_name, **kw)
                upload = blob.upload_from_string

                def ignoring(data: bytes, **options: Any) -> Any:
                    options.pop("if_generation_match", None)
                    return upload(data, **options)

                blob.upload_from_string = ignoring
                return blob

            def __getattr__(self, attr: str) -> Any:
                return getattr(real_bucket, attr)

        return Bucket()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._real, attr)


def test_the_probe_refuses_a_server_that_ignores_generation_preconditions(
    gcs_bucket: str, gcs_options: dict[str, str]
) -> None:
    real = GcsStore(gcs_bucket, "q", gcs_options)
    store = GcsStore(gcs_bucket, "q", gcs_options, client=_IgnoringPreconditions(real.client))
    forget_endpoint_conditions(store.endpoint)
    try:
        with pytest.raises(ConditionalWritesNotHonouredError) as info:
            store.put_if_absent(KEY, b"x")
        assert "ifGenerationMatch=0 replaced it" in str(info.value)
        assert real.get(KEY) is None  # the caller's write was never sent
        assert real.list("") == []  # the probe's scratch object is gone
    finally:
        forget_endpoint_conditions(store.endpoint)
    assert isinstance(real.put_if_absent(KEY, b"x"), Written)  # the real server passes the probe


_PRODUCER_PROCESS = """
import sys
from osqueue.producer import Producer
uri, endpoint, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
options = {"fs.gs.storage.root.url": endpoint, "fs.gs.auth.type": "UNAUTHENTICATED", "fs.gs.project.id": "test-project"}
with Producer(uri, store_options=options, flush_interval=0.005) as p:
    handles = [p.produce([f"{name}-{i:04d}".encode()]) for i in range(count)]
    for h in handles:
        h.wait_durable(120)
"""


def test_two_producer_processes_then_a_consumer_reads_each_entry_once_in_order_and_a_second_consumer_fences_it(
    gcs_bucket: str, gcs_options: dict[str, str]
) -> None:
    """The issue's acceptance run on GCS: 2 processes x 500 entries, each flush a manifest CAS
    (generation precondition) contending with the other process."""
    uri, per_process = f"gs://{gcs_bucket}/acceptance/q", 500
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(pathlib.Path(__file__).resolve().parents[2] / "python"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    endpoint = gcs_options["fs.gs.storage.root.url"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _PRODUCER_PROCESS, uri, endpoint, name, str(per_process)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for name in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode(errors="replace")[-3000:]
    got: list[bytes] = []
    first = Consumer(uri, store_options=gcs_options)
    batch = first.next_batch()
    while batch is not None:
        got.extend(batch.entries)
        first.ack(batch.sequence)
        batch = first.next_batch()
    assert len(got) == 2 * per_process and len(set(got)) == len(got)
    for name in ("a", "b"):
        mine = [e for e in got if e.startswith(f"{name}-".encode())]
        assert mine == [f"{name}-{i:04d}".encode() for i in range(per_process)]  # in order per producer
    first.flush()
    with Producer(uri, store_options=gcs_options, flush_interval=0.01) as p:
        p.produce([b"late"]).wait_durable(60)
    second = Consumer(uri, store_options=gcs_options)
    assert second.epoch == first.epoch + 1
    with pytest.raises(FencedError):
        late = first.next_batch()
        assert late is not None
        first.ack(late.sequence)
        first.flush()
    late = second.next_batch()
    assert late is not None and late.entries == [b"late"]
    second.ack(late.sequence)
    second.close()


def test_cli_on_a_gs_queue_with_fs_gs_store_options(gcs_bucket: str, gcs_options: dict[str, str]) -> None:
    from test_cli import run, run_process

    path = f"gs://{gcs_bucket}/queues/cli"
    opts = [a for k, v in gcs_options.items() for a in ("--store-option", f"{k}={v}")]
    proc = run_process("produce", path, *opts, "--batch-size", "2", input=b"g1\ng2\ng3\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"3 entries durable in ")
    table = run("inspect", path, *opts)
    assert table.exit_code == 0 and f"osqueue gs://{gcs_bucket}/queues/cli" in table.stdout, table.stdout
    assert run("tail", path, *opts, "--ack").stdout == "g1\ng2\ng3\n"
    import json

    assert json.loads(run("inspect", path, *opts, "--json").stdout)["entries"] == []
    bad = run("inspect", path, *opts, "--store-option", "fs.gs.auth.type=KERBEROS")
    assert bad.exit_code == 2 and "fs.gs.auth.type" in bad.stderr


def test_the_server_keeps_every_file_in_its_state_dir_and_removes_it_at_stop(tmp_path: pathlib.Path) -> None:
    from gcs_fixtures import run_gcs_server

    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    with run_gcs_server(state_dir=state, env={**os.environ, "HOME": str(home)}) as server:
        client = server.client()
        client.create_bucket("state-dir-check")
        client.bucket("state-dir-check").blob("k").upload_from_string(b"v")
        assert list((state / "data").rglob("*")), "the filesystem backend writes inside the state dir"
        outside = sorted(str(p) for p in tmp_path.rglob("*") if state not in p.parents and p not in (state, home))
        assert outside == [], f"fake-gcs-server wrote outside its state dir: {outside}"
    assert server.proc.returncode == 0
    assert not state.exists(), "the state dir outlived the server"
    assert list(home.iterdir()) == []


def test_a_state_dir_that_exists_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "state").mkdir()
    script = pathlib.Path(__file__).resolve().parents[1] / "gcs" / "gcsserver.py"
    done = subprocess.run(
        [sys.executable, str(script), "--state-dir", str(tmp_path / "state")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "already exists" in done.stderr
