"""Object stores: the contract on every store, key safety, the local store's cross-process CAS."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from helpers import assert_well_formed

from osqueue.errors import InvalidConfigError, InvalidObjectKeyError, StoreError
from osqueue.store import (
    PRECONDITION_FAILED,
    InMemoryStore,
    LocalFileSystemStore,
    ObjectVersion,
    S3Store,
    Written,
    open_store,
    validate_key,
)

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[2] / "python"

BAD_KEYS = [
    ("", "empty"),
    ("/etc/passwd", "absolute"),
    ("../escape", "'..'"),
    ("ingest/../../escape", "'..'"),
    ("ingest/./x", "'.'"),
    ("ingest//x", "empty path segment"),
    ("ingest/", "empty path segment"),
    ("ingest\\x", "backslash"),
    ("ingest/\x00x", "NUL"),
    ("s3://bucket/key", "URIs"),
]


@pytest.mark.parametrize("key,reason", BAD_KEYS)
def test_validate_key_rejects(key: str, reason: str) -> None:
    with pytest.raises(InvalidObjectKeyError, match=reason) as info:
        validate_key(key)
    assert info.value.kind.value == "Configuration"


@pytest.mark.parametrize(
    "key", ["ingest/manifest", "a", "ingest/01J5T4R3KXBMZ7QV9N2WG8YDHP.batch", ".hidden/x", "a.b/c..d"]
)
def test_validate_key_accepts(key: str) -> None:
    assert validate_key(key) == key


class _NoIoClient:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"S3 was called ({name}) for an invalid key")


@pytest.mark.parametrize("kind", ["memory", "local", "s3"])
@pytest.mark.parametrize("key,reason", BAD_KEYS)
def test_every_operation_of_every_store_rejects_bad_keys_before_io(
    key: str, reason: str, kind: str, tmp_path: pathlib.Path
) -> None:
    store: Any = {
        "memory": lambda: InMemoryStore("bad-keys"),
        "local": lambda: LocalFileSystemStore(tmp_path / "root"),
        "s3": lambda: S3Store("bucket", "prefix", client=_NoIoClient()),
    }[kind]()
    ops = [
        lambda: store.get(key),
        lambda: store.put(key, b"x"),
        lambda: store.put_if_absent(key, b"x"),
        lambda: store.put_if_version_matches(key, b"x", ObjectVersion("v")),
        lambda: store.delete(key),
    ]
    for op in ops:
        with pytest.raises(InvalidObjectKeyError):
            op()
    assert not (tmp_path / "escape").exists()
    if kind == "local":
        assert list((tmp_path / "root").iterdir()) == []


def test_local_store_never_writes_outside_its_root(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    store = LocalFileSystemStore(root)
    for key in ("../outside", "a/../../outside", "/tmp/outside"):
        with pytest.raises(InvalidObjectKeyError):
            store.put(key, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


# -- the contract, on every store -----------------------------------------------------------------


def test_store_contract(any_store: Any) -> None:
    s = any_store
    assert s.get("ingest/manifest") is None
    first = s.put_if_absent("ingest/manifest", b"v1")
    assert isinstance(first, Written)
    assert s.put_if_absent("ingest/manifest", b"other") is PRECONDITION_FAILED
    got = s.get("ingest/manifest")
    assert got is not None and got.data == b"v1" and got.version == first.version
    second = s.put_if_version_matches("ingest/manifest", b"v2", first.version)
    assert isinstance(second, Written) and second.version != first.version
    assert s.put_if_version_matches("ingest/manifest", b"v3", first.version) is PRECONDITION_FAILED
    assert s.get("ingest/manifest").data == b"v2"
    assert s.put_if_version_matches("ingest/missing", b"x", first.version) is PRECONDITION_FAILED
    assert s.get("ingest/missing") is None

    s.put("ingest/a.batch", b"aaa")
    s.put("ingest/sub/b.batch", b"bb")
    s.put("other/c", b"c")
    s.put("ingest/a.batch", b"aaaa")  # overwrite
    listed = {(i.key, i.size) for i in s.list("ingest/")}
    assert listed == {("ingest/manifest", 2), ("ingest/a.batch", 4), ("ingest/sub/b.batch", 2)}
    assert {i.key for i in s.list("ingest/a")} == {"ingest/a.batch"}
    assert {i.key for i in s.list("")} >= {"ingest/manifest", "other/c"}
    s.delete("ingest/a.batch")
    s.delete("ingest/a.batch")  # missing is fine
    assert s.get("ingest/a.batch") is None
    assert "ingest/a.batch" not in {i.key for i in s.list("ingest/")}


def test_local_store_layout_versions_and_hidden_files(tmp_path: pathlib.Path) -> None:
    store = LocalFileSystemStore(tmp_path)
    out = store.put_if_absent("ingest/manifest", b"hello")
    assert out == Written(ObjectVersion("sha256:" + hashlib.sha256(b"hello").hexdigest()))
    assert (tmp_path / "ingest" / "manifest").read_bytes() == b"hello"
    assert (tmp_path / "ingest" / ".manifest.lock").exists()  # the lock file is never deleted
    store.put("ingest/x.batch", b"1")
    (tmp_path / "ingest" / ".stray.tmp-1234").write_bytes(b"junk")
    (tmp_path / "ingest" / ".hidden-dir").mkdir()
    (tmp_path / "ingest" / ".hidden-dir" / "y.batch").write_bytes(b"1")
    (tmp_path / "ingest" / "link.batch").symlink_to(tmp_path / "ingest" / "x.batch")
    assert {i.key for i in store.list("ingest/")} == {"ingest/manifest", "ingest/x.batch"}
    assert {i.key for i in store.list("ingest/x")} == {"ingest/x.batch"}
    assert store.list("nothing/") == []
    assert not [p for p in (tmp_path / "ingest").iterdir() if ".tmp-" in p.name and p.name != ".stray.tmp-1234"]
    assert store.uri == "file:" + str(tmp_path)


def test_local_store_lock_is_the_posix_record_lock(tmp_path: pathlib.Path) -> None:
    """A different process holding fcntl.lockf on the lock file blocks our CAS until a timeout
    (StoreError, never a hang); Java's FileChannel.lock takes the same lock."""
    store = LocalFileSystemStore(tmp_path, lock_timeout=0.3)
    store.put_if_absent("ingest/manifest", b"v1")
    lock_file = tmp_path / "ingest" / ".manifest.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import fcntl, os, sys
            fd = os.open({str(lock_file)!r}, os.O_RDWR)
            fcntl.lockf(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        version = store.get("ingest/manifest").version
        started = time.monotonic()
        with pytest.raises(StoreError, match="timed out") as info:
            store.put_if_version_matches("ingest/manifest", b"v2", version)
        assert time.monotonic() - started >= 0.25
        assert info.value.outcome_known
        assert store.get("ingest/manifest").data == b"v1"
    finally:
        holder.communicate("", timeout=10)
    assert isinstance(store.put_if_version_matches("ingest/manifest", b"v2", version), Written)


_WORKER = textwrap.dedent(
    """
    import json, sys, threading
    sys.path.insert(0, sys.argv[1])
    from osqueue.store import LocalFileSystemStore
    from osqueue.queue import QueueProducer
    from osqueue.producer import Producer
    root, mode, tag, threads, per_thread = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    shared = LocalFileSystemStore(root)
    out, errors = [], []
    def queue_worker(t):
        # threads 0 and 1 own a store (own committer: real CAS races inside the process too),
        # the others share one (group commit)
        store = LocalFileSystemStore(root) if t < 2 else shared
        qp = QueueProducer(store)
        try:
            for i in range(per_thread):
                loc = f"ingest/{tag}-{t}-{i}.batch"
                qp.enqueue(loc, timeout=120)
                out.append(loc)
        except Exception as e:
            errors.append(repr(e))
        finally:
            qp.close()
    def producer_worker(t, producer):
        try:
            hs = [producer.produce([f"{tag}-{t}-{i}".encode()]) for i in range(per_thread)]
            for h in hs:
                h.wait_durable(120)
            out.extend(f"{tag}-{t}-{i}" for i in range(per_thread))
        except Exception as e:
            errors.append(repr(e))
    if mode == "queue":
        ts = [threading.Thread(target=queue_worker, args=(t,)) for t in range(threads)]
    else:
        producer = Producer(root, flush_interval=0.005)
        ts = [threading.Thread(target=producer_worker, args=(t, producer)) for t in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
    if mode != "queue":
        producer.close()
    from osqueue.metrics import REGISTRY
    conflicts = REGISTRY.counter("buffer.manifest_conflicts", role="producer").value
    print(json.dumps({"done": out, "errors": errors, "conflicts": conflicts}))
    """
)


def _run_processes(
    root: pathlib.Path, mode: str, processes: int, threads: int, per_thread: int
) -> tuple[list[str], float]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(PYTHON_DIR), str(root), mode, f"p{n}", str(threads), str(per_thread)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(processes)
    ]
    done: list[str] = []
    conflicts = 0.0
    for p in procs:
        stdout, _ = p.communicate(timeout=180)
        assert p.returncode == 0
        result = json.loads(stdout.strip().splitlines()[-1])
        assert result["errors"] == []
        done.extend(result["done"])
        conflicts += result["conflicts"]
    return done, conflicts


def test_cross_process_cas_through_queue_producers(tmp_path: pathlib.Path) -> None:
    done, conflicts = _run_processes(tmp_path, "queue", processes=2, threads=4, per_thread=15)
    assert conflicts > 0  # the writers really raced
    store = LocalFileSystemStore(tmp_path)
    locations = assert_well_formed(store)
    assert sorted(locations) == sorted(done)
    assert len(locations) == 2 * 4 * 15
    # Within one thread, locations were enqueued in order.
    for n in range(2):
        for t in range(4):
            mine = [loc for loc in locations if loc.startswith(f"ingest/p{n}-{t}-")]
            assert mine == [f"ingest/p{n}-{t}-{i}.batch" for i in range(15)]


def test_cross_process_producers_then_one_consumer_reads_everything(tmp_path: pathlib.Path) -> None:
    from osqueue.consumer import Consumer

    done, _ = _run_processes(tmp_path, "producer", processes=2, threads=4, per_thread=10)
    assert len(done) == 80
    assert_well_formed(LocalFileSystemStore(tmp_path))
    seen: list[str] = []
    with Consumer(str(tmp_path)) as consumer:
        for batch in consumer:
            seen.extend(e.decode() for e in batch.entries)
            consumer.ack(batch.sequence)
    assert sorted(seen) == sorted(done)


# -- open_store ---------------------------------------------------------------------------------


def test_open_store_uris(tmp_path: pathlib.Path, s3_options: dict[str, str]) -> None:
    for uri in (str(tmp_path), f"file:{tmp_path}", f"file://{tmp_path}", f"file://localhost{tmp_path}"):
        s = open_store(uri)
        assert isinstance(s, LocalFileSystemStore) and s.root == str(tmp_path), uri
    assert open_store("memory://shared-name") is open_store("memory://shared-name")
    assert isinstance(open_store("memory://x"), InMemoryStore)
    s3 = open_store("s3a://bucket-name/some/prefix", s3_options)
    assert isinstance(s3, S3Store) and s3.uri == "s3://bucket-name/some/prefix"
    assert open_store("s3://bucket-name", s3_options).uri == "s3://bucket-name"


@pytest.mark.parametrize(
    "uri",
    ["relative/dir", "file:relative", "file://otherhost/dir", "http://x/y", "memory://", "s3:///x", "", "s3://b/../x"],
)
def test_open_store_rejects_bad_uris(uri: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        open_store(uri)
    assert "'path'" in str(info.value)


def test_open_store_opens_a_plugged_scheme_through_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    import osqueue.store as store_module

    module = types.ModuleType("osqueue_test_plugged_store")
    module.open_store = lambda uri, options: InMemoryStore.named(f"plugged-{uri.split('://')[1]}-{options.get('k')}")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(store_module.PLUGGED_STORES, "testmem", (module.__name__, "testextra"))
    assert open_store("testmem://q1", {"k": "v"}) is InMemoryStore.named("plugged-q1-v")


def test_open_store_names_the_extra_when_a_plugged_store_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import osqueue.store as store_module

    monkeypatch.setitem(store_module.PLUGGED_STORES, "testmem", ("osqueue_no_such_module", "testextra"))
    with pytest.raises(InvalidConfigError) as info:
        open_store("testmem://q1")
    assert "'path'" in str(info.value) and "pip install 'osqueue[testextra]'" in str(info.value)


def test_s3_client_options_mapping() -> None:
    store = S3Store(
        "b-1",
        "p",
        {
            "fs.s3a.endpoint": "minio.local:9000",
            "FS.S3A.ACCESS.KEY": "AK",
            "fs.s3a.secret.key": "SK",
            "fs.s3a.session.token": "TOK",
            "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": "eu-west-3",
        },
    )
    client = store.client
    assert client.meta.endpoint_url == "https://minio.local:9000"
    assert client.meta.region_name == "eu-west-3"
    assert client.meta.config.s3["addressing_style"] == "path"
    creds = client._request_signer._credentials
    assert (creds.access_key, creds.secret_key, creds.token) == ("AK", "SK", "TOK")
    with pytest.raises(InvalidConfigError, match="fs.s3a.path.style.access"):
        S3Store("b-1", "", {"fs.s3a.path.style.access": "maybe"})
    with pytest.raises(InvalidConfigError, match="fs.s3a.secret.key"):
        S3Store("b-1", "", {"fs.s3a.access.key": "AK"})


def test_in_memory_store_is_isolated_per_name() -> None:
    a, b = InMemoryStore.named("iso-a"), InMemoryStore.named("iso-b")
    a.put("k", b"1")
    assert b.get("k") is None
    InMemoryStore.forget("iso-a")
    assert InMemoryStore.named("iso-a").get("k") is None


def test_local_store_root_must_be_absolute() -> None:
    with pytest.raises(InvalidConfigError):
        LocalFileSystemStore("relative/path")
    assert os.path.isabs(LocalFileSystemStore(pathlib.Path("/tmp")).root)


def test_local_store_refuses_reserved_names_and_symlink_escapes(tmp_path):
    from osqueue.errors import InvalidObjectKeyError
    from osqueue.store import LocalFileSystemStore

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    store = LocalFileSystemStore(str(root))
    with pytest.raises(InvalidObjectKeyError, match="reserved"):
        store.put("ingest/.manifest.lock", b"x")
    with pytest.raises(InvalidObjectKeyError, match="outside the store root"):
        store.put("link/evil.batch", b"x")
    assert list(outside.iterdir()) == []


def test_local_store_refuses_a_file_symlink_that_points_outside_the_root(tmp_path):
    """Issue 14 item 7, decided as the JVM does (docs/format.md §1): reading through a file link that
    leaves the root is refused; a link inside the root, or a dangling one (missing), is fine."""
    from osqueue.errors import InvalidObjectKeyError
    from osqueue.store import LocalFileSystemStore

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "ingest").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.batch").write_bytes(b"not yours")
    (root / "ingest" / "escape.batch").symlink_to(outside / "secret.batch")
    (root / "ingest" / "inside.batch").write_bytes(b"ok")
    (root / "ingest" / "alias.batch").symlink_to(root / "ingest" / "inside.batch")
    (root / "ingest" / "dangling.batch").symlink_to(outside / "gone.batch")
    store = LocalFileSystemStore(str(root))
    with pytest.raises(InvalidObjectKeyError, match="outside the store root"):
        store.get("ingest/escape.batch")
    with pytest.raises(InvalidObjectKeyError, match="outside the store root"):
        store.put("ingest/escape.batch", b"overwrite")
    assert (outside / "secret.batch").read_bytes() == b"not yours"
    assert store.get("ingest/alias.batch").data == b"ok"
    assert store.get("ingest/dangling.batch") is None
