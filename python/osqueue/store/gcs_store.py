"""The Cloud Storage store (``gs://bucket[/prefix]``), through ``google-cloud-storage``.

Mirrors the JVM's ``osqueue.store.gcs`` (artifact ``osqueue-gcs``). Installed with the ``gcs``
extra (``pip install 'osqueue[gcs]'``); :func:`osqueue.store.open_store` imports this module only
when a ``gs://`` URI is opened, so the base install needs no Google SDK.

Versions are object generations. Conditional writes are generation preconditions:
``if_generation_match=0`` creates, ``if_generation_match=<generation>`` replaces; a 412 (and a 404
on a replace: the object is gone) means the condition failed. They are sent with no client
retries: a retried write whose first try landed would come back as 412 and hide the success, so an
unknown outcome raises :class:`~osqueue.errors.StoreError` and the queue resolves it by re-reading.

Configuration is the GCS connector's ``fs.gs.*`` keys (each also with a ``spark.hadoop.`` prefix),
as on the JVM (``GcsStoreConfig``): ``fs.gs.storage.root.url`` (the server, e.g. an emulator),
``fs.gs.project.id``, ``fs.gs.auth.type`` (``APPLICATION_DEFAULT``/``COMPUTE_ENGINE``,
``SERVICE_ACCOUNT_JSON_KEYFILE``, ``UNAUTHENTICATED``), ``fs.gs.auth.service.account.json.keyfile``,
``fs.gs.auth.service.account.email`` + ``.private.key`` (+ ``.private.key.id``),
``fs.gs.http.connect-timeout``, ``fs.gs.http.read-timeout`` and ``fs.gs.http.max.retry``. Without
credentials options, Application Default Credentials are used.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

import google.auth.exceptions
import requests
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.cloud import storage

from osqueue.errors import InvalidConfigError, InvalidObjectKeyError, StoreError
from osqueue.store.endpoint_conditions import PROBE_KEY_PREFIX, EndpointConditions, probed_conditions
from osqueue.store.gcs_store_config import (
    AUTH_TYPE,
    CONNECT_TIMEOUT,
    JSON_KEYFILE,
    MAX_RETRY,
    PROJECT_ID,
    READ_TIMEOUT,
    ROOT_URL,
    SERVICE_PATH,
    auth_value,
    gcs_credentials,
    gcs_option,
    gcs_timeout,
)
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

READ_ATTEMPTS = 5
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
# What the SDK raises for a failed request: HTTP errors, transport errors, credential errors.
_FAILURES = (gexc.GoogleAPIError, requests.exceptions.RequestException, google.auth.exceptions.GoogleAuthError, OSError)

__all__ = ["GcsStore", "open_store"]


def _missing_bucket(e: BaseException) -> bool:
    """Whether a 404 is Cloud Storage's "The specified bucket does not exist." (a missing object
    is "No such object"). An emulator may say neither: its missing bucket then reads as missing objects."""
    return isinstance(e, gexc.NotFound) and "bucket does not exist" in str(e).lower()


class GcsStore:
    """A store in a Cloud Storage bucket, under an optional key prefix (see the module doc).

    Before its first conditional write to a server, a store probes it with a scratch object under
    its prefix (docs/format.md §8): a server that lets a conditional write through where it must
    fail (an emulator that ignores preconditions) is refused with
    :class:`~osqueue.errors.ConditionalWritesNotHonouredError`. The verdict is kept per server.

    Args:
        bucket: The bucket.
        prefix: Keys live under ``prefix/`` (may be empty).
        options: The ``fs.gs.*`` settings (see the module doc).
        client: A ready ``google.cloud.storage.Client`` (``options`` then only gives timeouts and retries).
    """

    def __init__(
        self, bucket: str, prefix: str = "", options: Mapping[str, Any] | None = None, *, client: Any = None
    ) -> None:
        options = options or {}
        if not isinstance(bucket, str) or not _BUCKET.match(bucket):
            raise InvalidConfigError(
                "path",
                f"gs://{bucket}",
                "expected gs://bucket/prefix with a valid GCS bucket name "
                "(3 to 222 characters: lower-case letters, digits, '-', '_' and '.')",
            )
        self._bucket_name = bucket
        self._prefix = prefix.strip("/")
        if self._prefix:
            try:
                validate_key(self._prefix)
            except InvalidObjectKeyError as e:
                raise InvalidConfigError("path", f"gs://{bucket}/{prefix}", f"bad key prefix: {e}") from e
        service_path = gcs_option(options, SERVICE_PATH)
        if service_path is not None and service_path.strip("/") != "storage/v1":
            raise InvalidConfigError(
                SERVICE_PATH,
                service_path,
                f"osqueue speaks the JSON API at storage/v1/ only; set the server with {ROOT_URL}",
            )
        root = gcs_option(options, ROOT_URL)
        if root is not None and not re.match(r"^https?://[^/]+", root):
            raise InvalidConfigError(ROOT_URL, root, "expected an http(s):// URL")
        self._root = root.rstrip("/") if root else None
        retries_value = gcs_option(options, MAX_RETRY)
        if retries_value is None:
            retries = 10
        elif retries_value.isdigit() and int(retries_value) < 1000:
            retries = int(retries_value)
        else:
            raise InvalidConfigError(MAX_RETRY, retries_value, "expected a whole number of retries >= 0")
        self._timeout = (gcs_timeout(options, CONNECT_TIMEOUT, 20.0), gcs_timeout(options, READ_TIMEOUT, 20.0))
        # The SDK's default policy (transient errors, backoff), bounded: the connector's retries x a
        # request's timeout. Conditional writes pass retry=None instead.
        self._retry = Retry(timeout=max(1.0, (retries + 1) * sum(self._timeout))) if retries > 0 else None
        if client is None:
            credentials = gcs_credentials(options)
            kwargs: dict[str, Any] = {"project": gcs_option(options, PROJECT_ID)}
            if credentials is not None:
                kwargs["credentials"] = credentials
            if self._root:
                kwargs["client_options"] = {"api_endpoint": self._root}
            try:
                client = storage.Client(**kwargs)
            except google.auth.exceptions.DefaultCredentialsError as e:
                raise InvalidConfigError(AUTH_TYPE, auth_value(options), f"no credentials: {e}") from e
        self._client = client
        self._bucket = client.bucket(bucket)

    @property
    def uri(self) -> str:
        return f"gs://{self._bucket_name}/{self._prefix}" if self._prefix else f"gs://{self._bucket_name}"

    @property
    def endpoint(self) -> str:
        """The server (the key of what was learned about conditional writes)."""
        return self._root or "Google Cloud Storage"

    @property
    def client(self) -> Any:
        return self._client

    def _full(self, key: str) -> str:
        validate_key(key)
        return f"{self._prefix}/{key}" if self._prefix else key

    def _fail(self, what: str, key: str, e: BaseException, *, outcome_known: bool = False) -> StoreError:
        hint = ""
        if _missing_bucket(e):
            hint = f" (the bucket '{self._bucket_name}' does not exist: create it first)"
        elif isinstance(e, (gexc.Unauthorized, gexc.Forbidden)):
            hint = f" (check the credentials: {AUTH_TYPE}, {JSON_KEYFILE}, or Application Default Credentials)"
        return StoreError(
            f"GCS {what} of '{key}' in {self.uri} via {self.endpoint} failed: {e}{hint}", outcome_known=outcome_known
        )

    def get(self, key: str) -> VersionedObject | None:
        full = self._full(key)
        for _ in range(READ_ATTEMPTS):
            blob = self._bucket.blob(full)
            try:
                data = blob.download_as_bytes(timeout=self._timeout, retry=self._retry)
            except gexc.NotFound as e:
                if _missing_bucket(e):
                    raise self._fail("GET", key, e) from e
                return None
            except _FAILURES as e:
                raise self._fail("GET", key, e) from e
            if blob.generation is not None:  # from the download's x-goog-generation: bytes and version together
                return VersionedObject(data, ObjectVersion(str(blob.generation)))
            # No generation header: read the metadata, then the bytes of that very generation.
            try:
                meta = self._bucket.get_blob(full, timeout=self._timeout, retry=self._retry)
                if meta is None:
                    return None
                exact = self._bucket.blob(full, generation=meta.generation)
                return VersionedObject(
                    exact.download_as_bytes(timeout=self._timeout, retry=self._retry),
                    ObjectVersion(str(meta.generation)),
                )
            except gexc.NotFound:
                continue  # replaced or deleted in between
            except _FAILURES as e:
                raise self._fail("GET", key, e) from e
        raise StoreError(
            f"GCS GET of '{key}' in {self.uri}: the object was replaced between reading its "
            f"generation and its bytes {READ_ATTEMPTS} times in a row"
        )

    def put(self, key: str, data: bytes) -> None:
        full = self._full(key)
        try:
            self._bucket.blob(full).upload_from_string(
                bytes(data), content_type="application/octet-stream", timeout=self._timeout, retry=self._retry
            )
        except _FAILURES as e:
            raise self._fail("PUT", key, e) from e

    def _conditional(self, full: str, data: bytes, generation: int, key: str) -> CasOutcome:
        """A write with ``if_generation_match=generation`` (0: only if absent), never retried."""
        blob = self._bucket.blob(full)
        try:
            blob.upload_from_string(
                bytes(data),
                content_type="application/octet-stream",
                if_generation_match=generation,
                timeout=self._timeout,
                retry=None,
            )
        except gexc.PreconditionFailed:
            return PRECONDITION_FAILED
        except gexc.NotFound as e:
            if generation != 0 and not _missing_bucket(e):
                return PRECONDITION_FAILED  # a replace of an object that is gone
            raise self._fail(f"PUT if_generation_match={generation}", key, e, outcome_known=True) from e
        except gexc.ClientError as e:
            code = getattr(e, "code", None)
            known = isinstance(code, int) and code not in (408, 429)  # rejected outright: certainly not applied
            raise self._fail(f"PUT if_generation_match={generation}", key, e, outcome_known=known) from e
        except _FAILURES as e:
            raise StoreError(
                f"GCS PUT if_generation_match={generation} of '{key}' in {self.uri} via {self.endpoint} "
                f"failed (outcome unknown): {e}"
            ) from e
        if blob.generation is None:
            raise StoreError(
                f"GCS PUT if_generation_match={generation} of '{key}' in {self.uri} returned no generation"
            )
        return Written(ObjectVersion(str(blob.generation)))

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        full = self._full(key)
        self.conditions()
        return self._conditional(full, data, 0, key)

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        full = self._full(key)
        self.conditions()
        token = expected_version.token
        if not token.isdigit() or int(token) <= 0:
            return PRECONDITION_FAILED  # a version that is no generation cannot be the object's current one
        return self._conditional(full, data, int(token), key)

    def conditions(self) -> EndpointConditions:
        """What this store's server does with conditional writes, probed on first use.

        Raises:
            ConditionalWritesNotHonouredError: The server does not honour them.
            StoreError: The probe could not run (nothing was learned; the next call tries again).
        """
        return probed_conditions(self.endpoint, self._probe, conclusive=lambda e: "does not exist" in str(e))

    def _probe(self) -> EndpointConditions:
        """A scratch object: a create that must fail on the existing object, a replace with a wrong
        generation that must fail, and one with the object's own generation that must land."""
        name = PROBE_KEY_PREFIX + secrets.token_hex(8)
        full = self._full(name)
        where = f"'{full}' in bucket '{self._bucket_name}'"

        def refuse(detail: str) -> EndpointConditions:
            return EndpointConditions(self.endpoint, (), detail)

        try:
            created = self._conditional(full, b"osqueue probe 1", 0, name)
            if not isinstance(created, Written):
                return refuse(f"creating the new object {where} with ifGenerationMatch=0 failed")
            generation = int(created.version.token)
            if self._conditional(full, b"osqueue probe 2", 0, name) is not PRECONDITION_FAILED:
                return refuse(
                    f"a write of the existing object {where} with ifGenerationMatch=0 replaced it (GCS answers 412)"
                )
            if self._conditional(full, b"osqueue probe 3", generation + 1000003, name) is not PRECONDITION_FAILED:
                return refuse(
                    f"a write of {where} with ifGenerationMatch set to a wrong generation replaced it (GCS answers 412)"
                )
            if self._conditional(full, b"osqueue probe 4", generation, name) is PRECONDITION_FAILED:
                return refuse(
                    f"a write of {where} with ifGenerationMatch set to its own generation {generation} failed"
                )
            return EndpointConditions(self.endpoint, ())
        finally:
            try:
                self._bucket.blob(full).delete(timeout=self._timeout)
            except _FAILURES:
                pass  # a scratch object left behind is harmless (GC deletes only batch files)

    def list(self, prefix: str) -> list[ObjectInfo]:
        validate_prefix(prefix)
        full = f"{self._prefix}/{prefix}" if self._prefix else prefix
        strip = len(self._prefix) + 1 if self._prefix else 0
        out: list[ObjectInfo] = []
        try:
            for blob in self._client.list_blobs(
                self._bucket_name, prefix=full, timeout=self._timeout, retry=self._retry
            ):
                key = blob.name[strip:]
                try:
                    validate_key(key)
                except InvalidObjectKeyError:
                    continue  # not addressable through this store (directory placeholders)
                out.append(ObjectInfo(key, int(blob.size or 0), epoch_ms(blob.updated)))
        except _FAILURES as e:
            raise self._fail("LIST", prefix, e) from e
        return out

    def delete(self, key: str) -> None:
        full = self._full(key)
        try:
            self._bucket.blob(full).delete(timeout=self._timeout, retry=self._retry)
        except gexc.NotFound as e:
            if _missing_bucket(e):
                raise self._fail("DELETE", key, e) from e
        except _FAILURES as e:
            raise self._fail("DELETE", key, e) from e

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


def open_store(uri: str, options: Mapping[str, Any]) -> GcsStore:
    """Opens ``gs://bucket[/prefix]`` (called by :func:`osqueue.store.open_store`)."""
    rest = uri.split("://", 1)[1] if "://" in uri else ""
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise InvalidConfigError(
            "path",
            uri,
            "expected gs://bucket/prefix with a valid GCS bucket name "
            "(3 to 222 characters: lower-case letters, digits, '-', '_' and '.')",
        )
    return GcsStore(bucket, prefix, options)
