"""Azure Blob Storage / ADLS Gen2 store (JVM: ``osqueue.store.azure.AzureBlobStore``).

Opened for ``abfss://container@account.dfs.core.windows.net/prefix`` (ADLS Gen2),
``wasbs://container@account.blob.core.windows.net/prefix`` (Blob), ``abfs://`` and ``wasb://``:
all reach the same blobs through the account's Blob endpoint. Configured by hadoop-azure's
``fs.azure.*`` keys (see :func:`azure_auth`). Needs the ``azure`` extra
(``pip install 'osqueue[azure]'``): this module is imported only when such a path is opened.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient

from osqueue.errors import InvalidObjectKeyError, StoreError
from osqueue.store.azure_location import AzureLocation
from osqueue.store.azure_store_config import ACCOUNT_KEY, AzureAuth, azure_auth, azure_endpoint, azure_max_tries
from osqueue.store.endpoint_conditions import IF_MATCH_QUOTED, PROBE_KEY_PREFIX, EndpointConditions, probed_conditions
from osqueue.store.object_store import (
    PRECONDITION_FAILED,
    CasOutcome,
    ObjectInfo,
    ObjectVersion,
    VersionedObject,
    Written,
    epoch_ms,
    validate_key,
    validate_prefix,
)

__all__ = ["AzureLocation", "AzureAuth", "AzureBlobStore", "azure_auth", "open_store"]


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
        self._endpoint = azure_endpoint(opts, location)
        self._auth = azure_auth(opts, location)
        tries = azure_max_tries(opts)
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
        validate_prefix(prefix)
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
                out.append(ObjectInfo(key, int(blob.size or 0), epoch_ms(blob.last_modified)))
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
