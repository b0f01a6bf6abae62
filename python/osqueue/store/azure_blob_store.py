"""Azure Blob Storage / ADLS Gen2 store (mirrors the JVM's osqueue.store.azure).

Opened for ``abfss://container@account.dfs.core.windows.net/prefix`` (ADLS Gen2),
``wasbs://container@account.blob.core.windows.net/prefix`` (Blob), ``abfs://`` and ``wasb://``:
all reach the same blobs through the account's Blob endpoint. Configured by hadoop-azure's
``fs.azure.*`` keys (see :func:`azure_auth`). Needs the ``azure`` extra
(``pip install 'osqueue[azure]'``): this module is imported only when such a path is opened.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient

from osqueue.errors import InvalidConfigError, InvalidObjectKeyError, StoreError
from osqueue.store.endpoint_conditions import IF_MATCH_QUOTED, PROBE_KEY_PREFIX, EndpointConditions, probed_conditions
from osqueue.store.object_store import (
    PRECONDITION_FAILED,
    CasOutcome,
    ObjectInfo,
    ObjectVersion,
    VersionedObject,
    Written,
    _validate_prefix,
    validate_key,
)

ENDPOINT = "fs.azure.blob.endpoint"
"""The Blob endpoint, replacing the one the path's host names (azurite, a private endpoint)."""
AUTH_TYPE = "fs.azure.account.auth.type"
ACCOUNT_KEY = "fs.azure.account.key"
SAS_FIXED_TOKEN = "fs.azure.sas.fixed.token"
CLIENT_ID = "fs.azure.account.oauth2.client.id"
CLIENT_SECRET = "fs.azure.account.oauth2.client.secret"
CLIENT_ENDPOINT = "fs.azure.account.oauth2.client.endpoint"
MAX_RETRIES = "fs.azure.io.retry.max.retries"
SCHEMES = ("abfss", "abfs", "wasbs", "wasb")

_FORM = (
    "expected abfss://container@account.dfs.core.windows.net/prefix or "
    "wasbs://container@account.blob.core.windows.net/prefix"
)
_URI = re.compile(r"(?i)^(abfss|abfs|wasbs|wasb)://([^@/]*)@([^/]*)(?:/(.*))?$")
_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]$")
_TOKEN_ENDPOINT = re.compile(r"^(https://[^/]+)/([^/]+)/oauth2/(?:v2\.0/)?token/?$")


def _swap_service(host: str, frm: str, to: str) -> str:
    account, dot, rest = host.partition(".")
    return f"{account}.{to}.{rest[len(frm) + 1 :]}" if dot and rest.startswith(frm + ".") else host


@dataclass(frozen=True)
class AzureLocation:
    """Where a queue lives in Azure, from its hadoop-azure path."""

    scheme: str
    container: str
    account: str
    host: str
    prefix: str

    @staticmethod
    def parse(uri: str) -> AzureLocation:
        m = _URI.match(uri)
        if not m:
            raise InvalidConfigError("path", uri, _FORM)
        scheme, container, host, rest = m.group(1).lower(), m.group(2), m.group(3).lower(), m.group(4) or ""
        if not container:
            raise InvalidConfigError("path", uri, f"name the container before '@': {_FORM}")
        if not _CONTAINER.match(container):
            raise InvalidConfigError(
                "path",
                uri,
                f"'{container}' is not an Azure container name (3-63 lower-case letters, digits and single hyphens)",
            )
        account = host.split(".", 1)[0]
        if not account or "." not in host:
            raise InvalidConfigError("path", uri, f"name the storage account's host after '@': {_FORM}")
        prefix = rest.strip("/")
        if prefix:
            try:
                validate_key(prefix)
            except InvalidObjectKeyError as e:
                raise InvalidConfigError("path", uri, f"the prefix is not a valid key: {e}") from e
        return AzureLocation(scheme, container, account, host, prefix)

    @property
    def blob_endpoint(self) -> str:
        """The Blob service URL: https, except for wasb:// (hadoop-azure's plain-HTTP scheme)."""
        return ("http" if self.scheme == "wasb" else "https") + "://" + _swap_service(self.host, "dfs", "blob")

    @property
    def other_host(self) -> str:
        """The account's host in the other service (Blob <-> DFS): hadoop-azure keys may name either."""
        swapped = _swap_service(self.host, "dfs", "blob")
        return swapped if swapped != self.host else _swap_service(self.host, "blob", "dfs")

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.container}@{self.host}" + (f"/{self.prefix}" if self.prefix else "")


@dataclass(frozen=True)
class AzureAuth:
    """How a store authenticates: ``kind`` is shared_key, sas, client_secret or default_chain.
    ``repr`` never shows a secret."""

    kind: str
    account: str = ""
    secret: str = ""  # the account key, SAS token or client secret
    tenant: str = ""
    client_id: str = ""
    authority: str = ""

    def __repr__(self) -> str:
        shown = {"shared_key": f"({self.account}, <key>)", "sas": "(<token>)", "default_chain": ""}
        return f"AzureAuth.{self.kind}" + shown.get(
            self.kind, f"({self.tenant}, {self.client_id}, <secret>, {self.authority})"
        )


def _lookup(options: Mapping[str, Any], names: list[str]) -> tuple[str, str] | None:
    for name in names:
        for key in (name, f"spark.hadoop.{name}"):
            if key in options and str(options[key]).strip():
                return name, str(options[key]).strip()
    return None


def azure_auth(options: Mapping[str, Any], location: AzureLocation) -> AzureAuth:
    """Reads hadoop-azure's credential keys, as the JVM store does (each also with ``spark.hadoop.``).

    A per-account key (``<key>.<account>.dfs.core.windows.net`` or the ``.blob.`` host) overrides
    the plain one. Without ``fs.azure.account.auth.type`` the first of account key
    (``fs.azure.account.key``), SAS token (``fs.azure.sas.fixed.token``, or WASB's
    ``fs.azure.sas.<container>.<account host>``) and OAuth client credentials
    (``fs.azure.account.oauth2.client.{id,secret,endpoint}``) that is set is used; with none,
    azure-identity's default credential chain.
    """
    hosts = list(dict.fromkeys([location.host, location.other_host]))

    def per_account(name: str) -> tuple[str, str] | None:
        return _lookup(options, [f"{name}.{h}" for h in hosts] + [name])

    def shared_key() -> AzureAuth | None:
        found = per_account(ACCOUNT_KEY)
        if found is None:
            return None
        try:
            base64.b64decode(found[1], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidConfigError(found[0], "<hidden>", "the account key is not Base64") from None
        return AzureAuth("shared_key", account=location.account, secret=found[1])

    def sas() -> AzureAuth | None:
        found = per_account(SAS_FIXED_TOKEN) or _lookup(
            options, [f"fs.azure.sas.{location.container}.{h}" for h in hosts]
        )
        return None if found is None else AzureAuth("sas", secret=found[1].lstrip("?"))

    def oauth() -> AzureAuth | None:
        found = per_account(CLIENT_ID)
        if found is None:
            return None

        def need(name: str) -> tuple[str, str]:
            value = per_account(name)
            if value is None:
                raise InvalidConfigError(
                    name,
                    "",
                    f"OAuth client credentials need {CLIENT_ID}, {CLIENT_SECRET} and {CLIENT_ENDPOINT} "
                    f"(optionally suffixed with .{location.host})",
                )
            return value

        secret = need(CLIENT_SECRET)[1]
        key, endpoint = need(CLIENT_ENDPOINT)
        m = _TOKEN_ENDPOINT.match(endpoint)
        if not m:
            raise InvalidConfigError(
                key,
                endpoint,
                "expected the tenant's token endpoint, https://login.microsoftonline.com/<tenant id>/oauth2/token",
            )
        return AzureAuth("client_secret", secret=secret, tenant=m.group(2), client_id=found[1], authority=m.group(1))

    def missing(auth_type: str, name: str) -> InvalidConfigError:
        return InvalidConfigError(name, "", f"{AUTH_TYPE} is {auth_type}: set {name}.{location.host} (or {name})")

    auth_type = per_account(AUTH_TYPE)
    kind = auth_type[1].lower() if auth_type else None
    if kind == "sharedkey":
        return shared_key() or _raise(missing("SharedKey", ACCOUNT_KEY))
    if kind == "sas":
        return sas() or _raise(missing("SAS", SAS_FIXED_TOKEN))
    if kind == "oauth":  # client credentials when given; other token providers are the default chain's
        return oauth() or AzureAuth("default_chain")
    if kind == "custom":
        return AzureAuth("default_chain")
    if kind is not None:
        raise InvalidConfigError(AUTH_TYPE, auth_type[1] if auth_type else "", "expected SharedKey, SAS or OAuth")
    return shared_key() or sas() or oauth() or AzureAuth("default_chain")


def _raise(e: Exception) -> Any:
    raise e


def _endpoint(options: Mapping[str, Any], location: AzureLocation) -> str:
    found = _lookup(options, [ENDPOINT])
    if found is None:
        return location.blob_endpoint
    if not re.match(r"(?i)^https?://[^/]+", found[1]):
        raise InvalidConfigError(
            found[0],
            found[1],
            "expected the Blob service URL, e.g. https://account.blob.core.windows.net or http://127.0.0.1:10000/devstoreaccount1 (azurite)",
        )
    return found[1].rstrip("/")


def _max_tries(options: Mapping[str, Any]) -> int:
    found = _lookup(options, [MAX_RETRIES])
    if found is None:
        return 4
    try:
        n = int(found[1])
    except ValueError:
        n = -1
    if n < 0:
        raise InvalidConfigError(found[0], found[1], "expected a whole number of retries >= 0")
    return n + 1


class AzureBlobStore:
    """A store in an Azure Blob Storage / ADLS Gen2 container under a key prefix (azure-storage-blob).

    Versions are ETags. Conditional writes are Azure's conditional Put Blob: ``If-None-Match: *``
    to create (409 BlobAlreadyExists or 412 when the blob exists) and ``If-Match: <etag>`` to
    replace (412, or 404 when the blob is gone); they go through a client that never retries, so an
    unknown outcome raises ``StoreError`` instead of hiding a landed write behind a 412. Before its
    first conditional write to an endpoint the store probes it (docs/format.md §8), as the S3 store does.
    """

    def __init__(self, location: AzureLocation, options: Mapping[str, Any] | None = None) -> None:
        opts = dict(options or {})
        self._location = location
        self._root = location.prefix + "/" if location.prefix else ""
        self._endpoint = _endpoint(opts, location)
        self._auth = azure_auth(opts, location)
        tries = _max_tries(opts)
        self._container = self._client(tries)
        self._cas_container = self._client(1)

    def _client(self, tries: int) -> ContainerClient:
        auth = self._auth
        credential: Any
        if auth.kind == "shared_key":
            credential = {"account_name": auth.account, "account_key": auth.secret}
        elif auth.kind == "sas":
            credential = auth.secret
        elif auth.kind == "client_secret":
            from azure.identity import ClientSecretCredential

            credential = ClientSecretCredential(auth.tenant, auth.client_id, auth.secret, authority=auth.authority)
        else:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential()
        service = BlobServiceClient(
            self._endpoint, credential=credential, retry_total=tries - 1, connection_timeout=10, read_timeout=60
        )
        return service.get_container_client(self._location.container)

    @property
    def uri(self) -> str:
        return self._location.uri

    @property
    def endpoint(self) -> str:
        """The endpoint and container (the key of what was learned about conditional writes)."""
        return f"{self._endpoint}/{self._location.container}"

    def _full(self, key: str) -> str:
        return self._root + validate_key(key)

    def _fail(self, op: str, full: str, e: Exception, *, outcome_known: bool = False) -> StoreError:
        hint = ""
        if isinstance(e, HttpResponseError):
            code = getattr(e, "error_code", None) or ""
            detail = f"{e.status_code} {code}"
            if code == "ContainerNotFound":
                hint = (
                    f" (the container '{self._location.container}' does not exist: osqueue does not create containers)"
                )
            elif e.status_code == 403:
                hint = f" (check the credentials: {ACCOUNT_KEY}.{self._location.host}, a SAS token or OAuth; using {self._auth!r})"
        else:
            detail = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return StoreError(
            f"Azure {op} of '{full}' in {self.uri} via {self._endpoint} failed: {detail}{hint}",
            outcome_known=outcome_known,
        )

    def get(self, key: str) -> VersionedObject | None:
        full = self._full(key)
        try:
            downloader = self._container.get_blob_client(full).download_blob()
            data = downloader.readall()
        except ResourceNotFoundError as e:
            if getattr(e, "error_code", None) == "ContainerNotFound":
                raise self._fail("GET", full, e) from e
            return None
        except AzureError as e:
            raise self._fail("GET", full, e) from e
        return VersionedObject(bytes(data), ObjectVersion(str(downloader.properties.etag)))

    def put(self, key: str, data: bytes) -> None:
        full = self._full(key)
        try:
            self._container.get_blob_client(full).upload_blob(bytes(data), overwrite=True)
        except AzureError as e:
            raise self._fail("PUT", full, e) from e

    def _upload(self, full: str, data: bytes, etag: str | None) -> str | None:
        """A conditional Put Blob (create when ``etag`` is None): the new ETag, or None when the condition failed."""
        blob = self._cas_container.get_blob_client(full)
        try:
            if etag is None:
                r = blob.upload_blob(bytes(data), overwrite=False)
            else:
                r = blob.upload_blob(
                    bytes(data), overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified
                )
        except HttpResponseError as e:
            code = getattr(e, "error_code", None)
            if e.status_code == 412 or code == "BlobAlreadyExists" or code == "BlobNotFound":
                return None
            raise
        return str(r["etag"])

    def _conditional(self, key: str, data: bytes, etag: str | None) -> CasOutcome:
        full = self._full(key)
        try:
            new = self._upload(full, data, etag)
        except HttpResponseError as e:
            # Rejected outright (403, 400...): certainly not applied. Anything else: unknown.
            known = 400 <= (e.status_code or 0) < 500 and e.status_code not in (408, 429)
            raise self._fail(
                f"conditional PUT ({'If-Match' if etag else 'If-None-Match: *'})", full, e, outcome_known=known
            ) from e
        except AzureError as e:
            raise self._fail(f"conditional PUT ({'If-Match' if etag else 'If-None-Match: *'})", full, e) from e
        return PRECONDITION_FAILED if new is None else Written(ObjectVersion(new))

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        validate_key(key)
        self.conditions()
        return self._conditional(key, data, None)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        validate_key(key)
        self.conditions()
        return self._conditional(key, data, expected_version.token)

    def conditions(self) -> EndpointConditions:
        """What this store's endpoint does with conditional writes, probed on first use.

        Raises:
            ConditionalWritesNotHonouredError: The endpoint does not honour them.
            StoreError: The probe could not run (nothing was learned; the next call tries again).
        """
        return probed_conditions(self.endpoint, self._probe)

    def _probe(self) -> EndpointConditions:
        """A scratch object: a create that must fail, a replace with a wrong ETag that must fail,
        and one with its own ETag that must land."""
        full = self._root + PROBE_KEY_PREFIX + secrets.token_hex(8)
        where = f"'{full}' in container '{self._location.container}'"

        def put(body: bytes, etag: str | None) -> str | None:
            try:
                return self._upload(full, body, etag)
            except AzureError as e:
                raise StoreError(
                    f"probing conditional writes at {self.endpoint} with {where} failed: {e}", outcome_known=True
                ) from e

        def refuse(detail: str) -> EndpointConditions:
            return EndpointConditions(self.endpoint, (), detail)

        try:
            created = put(b"osqueue probe 1", None)
            if created is None:
                return refuse(f"a PUT of the new object {where} with If-None-Match: * failed")
            if put(b"osqueue probe 2", None) is not None:
                return refuse(
                    f"a PUT of the existing object {where} with If-None-Match: * replaced it (Azure answers 409)"
                )
            wrong = '"0x' + uuid.uuid4().hex[:15].upper() + '"'
            if put(b"osqueue probe 3", wrong) is not None:
                return refuse(f"a PUT of {where} with If-Match set to a wrong ETag replaced it (Azure answers 412)")
            if put(b"osqueue probe 4", created) is None:
                return refuse(f"a PUT of {where} with If-Match set to its own ETag {created} failed")
            return EndpointConditions(self.endpoint, (IF_MATCH_QUOTED,))
        finally:
            try:
                self._container.get_blob_client(full).delete_blob()
            except AzureError:
                pass  # a scratch object left behind is harmless (GC deletes only batch files)

    def list(self, prefix: str) -> list[ObjectInfo]:
        _validate_prefix(prefix)
        full = self._root + prefix
        out: list[ObjectInfo] = []
        try:
            # Metadata too: on an ADLS Gen2 (hierarchical) account, directories are listed as
            # empty blobs marked hdi_isfolder; they are no objects.
            for blob in self._container.list_blobs(name_starts_with=full, include=["metadata"]):
                if str((blob.metadata or {}).get("hdi_isfolder", "")).lower() == "true":
                    continue
                key = blob.name[len(self._root) :]
                try:
                    validate_key(key)
                except InvalidObjectKeyError:
                    continue  # not addressable through this store
                out.append(ObjectInfo(key, int(blob.size or 0)))
        except AzureError as e:
            raise self._fail("LIST", full, e) from e
        return out

    def delete(self, key: str) -> None:
        full = self._full(key)
        try:
            self._container.get_blob_client(full).delete_blob()
        except ResourceNotFoundError as e:
            if getattr(e, "error_code", None) == "ContainerNotFound":
                raise self._fail("DELETE", full, e) from e
        except AzureError as e:
            raise self._fail("DELETE", full, e) from e

    def close(self) -> None:
        self._container.close()
        self._cas_container.close()


def open_store(uri: str, options: Mapping[str, Any]) -> AzureBlobStore:
    """Opens an ``abfss://``, ``abfs://``, ``wasbs://`` or ``wasb://`` queue path (osqueue.store.PLUGGED_STORES)."""
    return AzureBlobStore(AzureLocation.parse(uri), options)
