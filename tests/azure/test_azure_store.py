"""The Azure Blob / ADLS Gen2 store on azurite: the store contract, concurrent writers, the probe,
hadoop-azure's keys and errors."""

from __future__ import annotations

import base64
import threading
from typing import Any

import pytest

from osqueue.errors import ConditionalWritesNotHonouredError, InvalidConfigError, InvalidObjectKeyError, StoreError
from osqueue.store import PRECONDITION_FAILED, ObjectVersion, Written, forget_endpoint_conditions, open_store

from .support import Azurite

BAD_KEYS = ["", "/etc/passwd", "../escape", "ingest/../../x", "ingest//x", "ingest/", "ingest\\x", "s3://b/k"]


def test_store_contract(azure_store: Any) -> None:
    s = azure_store
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
    s.put("ingest/a.batch", b"aaaa")
    s.put("empty", b"")
    assert s.get("empty").data == b""
    assert {(i.key, i.size) for i in s.list("ingest/")} == {
        ("ingest/manifest", 2),
        ("ingest/a.batch", 4),
        ("ingest/sub/b.batch", 2),
    }
    assert {i.key for i in s.list("ingest/a")} == {"ingest/a.batch"}
    assert {i.key for i in s.list("")} == {
        "ingest/manifest",
        "ingest/a.batch",
        "ingest/sub/b.batch",
        "other/c",
        "empty",
    }
    s.delete("ingest/a.batch")
    s.delete("ingest/a.batch")  # missing is fine
    assert s.get("ingest/a.batch") is None


def test_concurrent_creates_and_replaces_have_exactly_one_winner(azure_store: Any) -> None:
    s = azure_store
    barrier = threading.Barrier(8)
    outcomes: list[Any] = []

    def create(i: int) -> None:
        barrier.wait()
        outcomes.append(s.put_if_absent("m", f"w{i}".encode()))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if isinstance(o, Written)]
    assert len(winners) == 1 and outcomes.count(PRECONDITION_FAILED) == 7
    base = winners[0].version
    outcomes.clear()
    barrier.reset()

    def replace(i: int) -> None:
        barrier.wait()
        outcomes.append(s.put_if_version_matches("m", f"r{i}".encode(), base))

    threads = [threading.Thread(target=replace, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if isinstance(o, Written)]
    assert len(winners) == 1 and outcomes.count(PRECONDITION_FAILED) == 7
    assert s.get("m").version == winners[0].version


def test_cas_increments_from_threads_count_exactly(azure_store: Any) -> None:
    s = azure_store
    s.put_if_absent("counter", b"0")

    def bump() -> None:
        for _ in range(15):
            while True:
                cur = s.get("counter")
                if isinstance(
                    s.put_if_version_matches("counter", str(int(cur.data) + 1).encode(), cur.version), Written
                ):
                    break

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.get("counter").data == b"60"


@pytest.mark.parametrize("key", BAD_KEYS)
def test_every_operation_rejects_bad_keys_before_io(azure_store: Any, key: str) -> None:
    for op in (
        lambda: azure_store.get(key),
        lambda: azure_store.put(key, b"x"),
        lambda: azure_store.put_if_absent(key, b"x"),
        lambda: azure_store.put_if_version_matches(key, b"x", ObjectVersion('"0x1"')),
        lambda: azure_store.delete(key),
    ):
        with pytest.raises(InvalidObjectKeyError):
            op()
    assert azure_store.list("") == []


def test_every_uri_form_reaches_the_same_blobs(azurite: Azurite, container: str) -> None:
    a = azurite.account
    abfss = open_store(f"abfss://{container}@{a}.dfs.core.windows.net/q", azurite.options)
    abfss.put("k", b"v")
    assert abfss.uri == f"abfss://{container}@{a}.dfs.core.windows.net/q"
    for uri in (
        f"wasbs://{container}@{a}.blob.core.windows.net/q",
        f"wasb://{container}@{a}.blob.core.windows.net/q",
        f"abfs://{container}@{a}.dfs.core.windows.net/q/",
    ):
        other = open_store(uri, {f"spark.hadoop.{k}": v for k, v in azurite.options.items()})
        assert other.get("k").data == b"v", uri


def test_probe_learns_azurite_honours_conditions_and_cleans_up(azurite: Azurite, container: str) -> None:
    s = open_store(azurite.uri(container), azurite.options)
    forget_endpoint_conditions(s.endpoint)
    assert s.conditions().refusal is None
    assert s.list("") == []


def test_a_server_that_ignores_conditions_is_refused(
    azurite: Azurite, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = open_store(azurite.uri(container), azurite.options)
    forget_endpoint_conditions(s.endpoint)

    def ignoring_conditions(full: str, data: bytes, etag: str | None) -> str:
        # As a server that accepts the condition headers and overwrites anyway.
        return str(s._cas_container.get_blob_client(full).upload_blob(data, overwrite=True)["etag"])

    monkeypatch.setattr(s, "_upload", ignoring_conditions)
    try:
        with pytest.raises(ConditionalWritesNotHonouredError) as info:
            s.put_if_absent("ingest/manifest", b"m")
        assert "If-None-Match: * replaced it" in str(info.value) and s.endpoint in str(info.value)
        assert s.get("ingest/manifest") is None
    finally:
        forget_endpoint_conditions(s.endpoint)


def test_missing_container_is_an_error_naming_it(azurite: Azurite) -> None:
    s = open_store(azurite.uri("no-such-container"), azurite.options)
    with pytest.raises(StoreError, match="'no-such-container' does not exist"):
        s.get("k")


def test_wrong_key_names_the_option_and_hides_the_key(azurite: Azurite, container: str) -> None:
    wrong = base64.b64encode(b"\x01" * 64).decode()
    s = open_store(azurite.uri(container), {**azurite.options, f"fs.azure.account.key.{azurite.host}": wrong})
    with pytest.raises(StoreError) as info:
        s.list("")
    assert "403" in str(info.value) and f"fs.azure.account.key.{azurite.host}" in str(info.value)
    assert wrong not in str(info.value)


def test_unreachable_endpoint_is_a_store_error(azurite: Azurite) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = open_store(
        azurite.uri("c00"),
        {
            **azurite.options,
            "fs.azure.blob.endpoint": f"http://127.0.0.1:{port}/x",
            "fs.azure.io.retry.max.retries": "0",
        },
    )
    with pytest.raises(StoreError, match=f"127.0.0.1:{port}"):
        s.get("k")


@pytest.mark.parametrize(
    "uri,options,option,text",
    [
        ("abfss://acct.dfs.core.windows.net/q", {}, "path", "expected abfss://"),
        ("abfss://Bad_Name@acct.dfs.core.windows.net/q", {}, "path", "not an Azure container name"),
        ("abfss://c00@acct.dfs.core.windows.net/a/../b", {}, "path", "not a valid key"),
        (
            "abfss://c00@acct.dfs.core.windows.net/q",
            {"fs.azure.blob.endpoint": "127.0.0.1:1"},
            "fs.azure.blob.endpoint",
            "Blob service URL",
        ),
        (
            "abfss://c00@acct.dfs.core.windows.net/q",
            {"fs.azure.account.key.acct.dfs.core.windows.net": "not base64!"},
            "fs.azure.account.key.acct.dfs.core.windows.net",
            "not Base64",
        ),
        (
            "abfss://c00@acct.dfs.core.windows.net/q",
            {"fs.azure.account.auth.type": "SharedKey"},
            "fs.azure.account.key",
            "SharedKey",
        ),
        (
            "abfss://c00@acct.dfs.core.windows.net/q",
            {"fs.azure.account.auth.type": "Kerberos"},
            "fs.azure.account.auth.type",
            "expected",
        ),
        (
            "abfss://c00@acct.dfs.core.windows.net/q",
            {"fs.azure.account.oauth2.client.id": "a"},
            "fs.azure.account.oauth2.client.secret",
            "OAuth",
        ),
        (
            "abfss://c00@acct.dfs.core.windows.net/q",
            {
                "fs.azure.account.oauth2.client.id": "a",
                "fs.azure.account.oauth2.client.secret": "b",
                "fs.azure.account.oauth2.client.endpoint": "login",
            },
            "fs.azure.account.oauth2.client.endpoint",
            "token endpoint",
        ),
        (
            "abfss://c00@acct.dfs.core.windows.net/q",
            {"fs.azure.io.retry.max.retries": "-1"},
            "fs.azure.io.retry.max.retries",
            ">= 0",
        ),
    ],
)
def test_bad_paths_and_options_name_the_option(uri: str, options: dict[str, str], option: str, text: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        open_store(uri, options)
    assert info.value.option == option and text in str(info.value)
    assert "not base64!" not in str(info.value)


def test_hadoop_azure_credentials_are_read() -> None:
    from osqueue.store.azure_blob_store import AzureAuth, AzureLocation, azure_auth

    at = AzureLocation.parse("abfss://events@acct.dfs.core.windows.net/team/q")
    assert at.blob_endpoint == "https://acct.blob.core.windows.net"
    assert (
        AzureLocation.parse("wasb://events@acct.blob.core.windows.net").blob_endpoint
        == "http://acct.blob.core.windows.net"
    )
    key = base64.b64encode(b"k").decode()
    assert azure_auth({"spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net": key}, at) == AzureAuth(
        "shared_key", "acct", key
    )
    assert azure_auth({"fs.azure.sas.fixed.token.acct.dfs.core.windows.net": "?sv=1"}, at) == AzureAuth(
        "sas", secret="sv=1"
    )
    assert azure_auth({"fs.azure.sas.events.acct.blob.core.windows.net": "sv=2"}, at) == AzureAuth("sas", secret="sv=2")
    oauth = azure_auth(
        {
            "fs.azure.account.auth.type": "OAuth",
            "fs.azure.account.oauth2.client.id.acct.dfs.core.windows.net": "app",
            "fs.azure.account.oauth2.client.secret": "s3cret",
            "fs.azure.account.oauth2.client.endpoint": "https://login.microsoftonline.com/tenant-1/oauth2/token",
        },
        at,
    )
    assert oauth == AzureAuth(
        "client_secret",
        secret="s3cret",
        tenant="tenant-1",
        client_id="app",
        authority="https://login.microsoftonline.com",
    )
    assert "s3cret" not in repr(oauth)
    assert azure_auth({}, at) == AzureAuth("default_chain")


def test_a_conditional_write_whose_answer_is_lost_is_an_unknown_outcome_resolved_by_reading(
    azure_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.core.exceptions import ServiceResponseError

    s = azure_store
    first = s.put_if_absent("ingest/manifest", b"v1")
    real = s._cas_container.get_blob_client

    class LandsThenLosesTheAnswer:
        def __init__(self, name: str) -> None:
            self._blob = real(name)

        def upload_blob(self, data: bytes, **kwargs: Any) -> Any:
            self._blob.upload_blob(data, **kwargs)  # applied on the server ...
            raise ServiceResponseError("connection reset while reading the response")  # ... answer lost

    monkeypatch.setattr(s._cas_container, "get_blob_client", LandsThenLosesTheAnswer)
    with pytest.raises(StoreError) as info:
        s.put_if_version_matches("ingest/manifest", b"v2", first.version)
    assert not info.value.outcome_known and "conditional PUT" in str(info.value)
    monkeypatch.undo()
    # Not a 412, not a retry that would 412: the caller re-reads and sees its write landed.
    assert s.get("ingest/manifest").data == b"v2"
