"""The S3 store: conditional writes over any S3-compatible endpoint (JVM: ``S3Store``)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from osqueue.errors import ConditionalWritesNotHonouredError, InvalidConfigError, InvalidObjectKeyError, StoreError
from osqueue.store.endpoint_conditions import (
    IF_MATCH_FORMS,
    PROBE_KEY_PREFIX,
    EndpointConditions,
    bare_etag,
    if_match_value,
    probed_conditions,
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
from osqueue.store.s3_store_config import make_s3_client

TRUSTED_CONFLICTS = 3
"""412s in a row on one key taken as conflicts without the form rule's HEAD once a replace in the endpoint's
current If-Match form has landed (docs/format.md §8); the next one is checked (JVM: the same)."""


class S3Store:
    """A store in an S3 bucket (or an S3-compatible server), under an optional key prefix.

    Conditional writes use ``If-None-Match: *`` and ``If-Match: <ETag>``. A 412 or 409 reply
    is a failed precondition, unless the client had retried the request (the first try may
    have landed): then the outcome is unknown and ``StoreError`` is raised. Every other
    failure is a ``StoreError``.

    Before its first conditional write to an endpoint, a store probes the endpoint with a
    scratch object under its prefix (docs/format.md §8): an endpoint that lets a conditional
    write through where it must fail is refused with
    :class:`~osqueue.errors.ConditionalWritesNotHonouredError`; the probe also learns whether
    the endpoint matches ``If-Match`` quoted (S3) or unquoted (Ceph RGW). The verdict is kept
    per endpoint for the process. A 412 on ``If-Match`` while the object still has the expected
    tag is retried once in the other form (which is then kept); if that fails too, the endpoint
    does not honour ``If-Match`` and ``ConditionalWritesNotHonouredError`` is raised. Once a replace
    in the current form has landed on the endpoint (the probe's, or a write), up to
    ``TRUSTED_CONFLICTS`` 412s in a row on a key are taken as conflicts without that check (one
    request less per conflict); the next one is checked.

    Args:
        bucket: The bucket.
        prefix: Keys live under ``prefix/`` (may be empty).
        options: Spark-style settings: ``fs.s3a.endpoint``, ``fs.s3a.access.key``,
            ``fs.s3a.secret.key``, ``fs.s3a.session.token``, ``fs.s3a.path.style.access``,
            ``fs.s3a.endpoint.region``, ``fs.s3a.connection.ssl.enabled`` (scheme of a bare
            host endpoint), ``fs.s3a.connection.establish.timeout`` and
            ``fs.s3a.connection.timeout`` (connect and read timeouts, Hadoop duration forms),
            ``fs.s3a.attempts.maximum`` (retries per request as in S3A; default 2, i.e. 3 attempts).
            Missing credentials and region come from boto3's default chain.
        client: A ready boto3 S3 client (``options`` is then ignored).
    """

    def __init__(
        self, bucket: str, prefix: str = "", options: Mapping[str, Any] | None = None, *, client: Any = None
    ) -> None:
        if not bucket or "/" in bucket:
            raise InvalidConfigError("path", f"s3://{bucket}", "name a bucket: s3://bucket[/prefix]")
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        if self._prefix:
            try:
                validate_key(self._prefix)
            except InvalidObjectKeyError as e:
                raise InvalidConfigError("path", f"s3://{bucket}/{prefix}", f"bad key prefix: {e}") from e
        self._client = client if client is not None else make_s3_client(options)
        # Per key: the 412s in a row taken as conflicts without the form rule's HEAD (§8).
        self._unchecked: dict[str, int] = {}

    @property
    def uri(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}" if self._prefix else f"s3://{self._bucket}"

    @property
    def endpoint(self) -> str:
        """The endpoint URL (the key of what was learned about conditional writes)."""
        return str(getattr(getattr(self._client, "meta", None), "endpoint_url", None) or "AWS S3")

    @property
    def client(self) -> Any:
        """The boto3 client."""
        return self._client

    def _full(self, key: str) -> str:
        validate_key(key)
        return f"{self._prefix}/{key}" if self._prefix else key

    def _fail(self, what: str, key: str, e: Exception) -> StoreError:
        return StoreError(f"S3 {what} of '{key}' in {self.uri} failed: {e}")

    def get(self, key: str) -> VersionedObject | None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            r = self._client.get_object(Bucket=self._bucket, Key=full)
            data = r["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise self._fail("GET", key, e) from e
        except BotoCoreError as e:
            raise self._fail("GET", key, e) from e
        return VersionedObject(data, ObjectVersion(r["ETag"]))

    def put(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            self._client.put_object(Bucket=self._bucket, Key=full, Body=bytes(data))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("PUT", key, e) from e

    def _conditional(self, key: str, data: bytes, **condition: str) -> CasOutcome:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            r = self._client.put_object(Bucket=self._bucket, Key=full, Body=bytes(data), **condition)
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = e.response.get("Error", {}).get("Code")
            retries = e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0
            failed_condition = status in (412, 409) or code in ("PreconditionFailed", "ConditionalRequestConflict")
            if "IfMatch" in condition and (status == 404 or code == "NoSuchKey"):
                failed_condition = True  # If-Match on a missing object
            if failed_condition:
                if retries > 0:
                    raise StoreError(
                        f"S3 conditional PUT of '{key}' in {self.uri}: precondition failed after {retries} "
                        "client-side retries, so an earlier try may have landed (outcome unknown)"
                    ) from e
                return PRECONDITION_FAILED
            if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429) and retries == 0:
                # The request was rejected outright (403, 400, ...): certainly not applied.
                raise StoreError(
                    f"S3 conditional PUT of '{key}' in {self.uri} was rejected: {e}", outcome_known=True
                ) from e
            raise StoreError(f"S3 conditional PUT of '{key}' in {self.uri} failed (outcome unknown): {e}") from e
        except BotoCoreError as e:
            raise StoreError(f"S3 conditional PUT of '{key}' in {self.uri} failed (outcome unknown): {e}") from e
        return Written(ObjectVersion(r["ETag"]))

    def put_if_absent(self, key: str, data: bytes) -> CasOutcome:
        validate_key(key)
        self.conditions()
        return self._conditional(key, data, IfNoneMatch="*")

    def put_if_version_matches(self, key: str, data: bytes, expected_version: ObjectVersion) -> CasOutcome:
        validate_key(key)
        conditions = self.conditions()
        tried = conditions.if_match_form
        outcome = self._conditional(key, data, IfMatch=if_match_value(expected_version.token, tried))
        if isinstance(outcome, Written):
            conditions.confirmed = tried
            self._unchecked.pop(key, None)
            return outcome
        unchecked = self._unchecked.get(key, 0)
        if conditions.confirmed == tried and unchecked < TRUSTED_CONFLICTS:
            # A replace in this form landed on this endpoint: the server takes it, so a 412 is a conflict
            # (docs/format.md §8), taken without the HEAD up to TRUSTED_CONFLICTS in a row per key.
            self._unchecked[key] = unchecked + 1
            return outcome
        if not self._still_at(key, expected_version):
            self._unchecked[key] = 0
            return outcome
        # 412 although the object still has the expected tag: this form is not the one the server
        # matches (Ceph RGW matches only unquoted tags). Once in each other form, then give up.
        for form in conditions.if_match_forms:
            if form == tried:
                continue
            outcome = self._conditional(key, data, IfMatch=if_match_value(expected_version.token, form))
            if isinstance(outcome, Written):
                conditions.learned(form)
                conditions.confirmed = form
                self._unchecked.pop(key, None)
                return outcome
        if not self._still_at(key, expected_version):
            return outcome
        raise ConditionalWritesNotHonouredError(
            self.endpoint,
            f"a PUT of '{self._full(key)}' in bucket '{self._bucket}' with If-Match set to the object's current "
            f"entity tag {expected_version.token} failed with 412 in every form tried "
            f"({', '.join(conditions.if_match_forms)}) while the object did not change",
        )

    def _still_at(self, key: str, version: ObjectVersion) -> bool:
        """Whether the object's entity tag (HEAD) is still ``version``; False when that cannot be told."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            r = self._client.head_object(Bucket=self._bucket, Key=self._full(key))
        except (ClientError, BotoCoreError):
            return False
        return bare_etag(r.get("ETag", "")) == bare_etag(version.token)

    def conditions(self) -> EndpointConditions:
        """What this store's endpoint does with conditional writes, probed on first use.

        Raises:
            ConditionalWritesNotHonouredError: The endpoint does not honour them.
            StoreError: The probe could not run (nothing was learned; the next call tries again).
        """
        return probed_conditions(self.endpoint, self._probe)

    def _probe(self) -> EndpointConditions:
        """A scratch object under the prefix: a conditional create that must fail, conditional
        replaces with a wrong tag that must fail, and one with the object's own tag that must land."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(PROBE_KEY_PREFIX + secrets.token_hex(8))
        where = f"'{full}' in bucket '{self._bucket}'"

        def put(body: bytes, **condition: str) -> str | None:
            """The new ETag, or None when the condition failed."""
            try:
                return str(self._client.put_object(Bucket=self._bucket, Key=full, Body=body, **condition)["ETag"])
            except ClientError as e:
                meta = e.response.get("ResponseMetadata", {})
                status = meta.get("HTTPStatusCode")
                if status in (412, 409, 404) and not meta.get("RetryAttempts"):
                    return None
                if status == 501:  # NotImplemented: the server says it has no conditional PUTs
                    raise _Refused(f"a PUT of {where} with {_header(condition)} answered 501 ({e})") from e
                raise StoreError(
                    f"probing conditional writes at {self.endpoint} with {where} failed: {e}", outcome_known=True
                ) from e
            except BotoCoreError as e:
                raise StoreError(
                    f"probing conditional writes at {self.endpoint} with {where} failed: {e}", outcome_known=True
                ) from e

        def refuse(detail: str) -> EndpointConditions:
            return EndpointConditions(self.endpoint, (), detail)

        try:
            created = put(b"osqueue probe 1", IfNoneMatch="*")
            if created is None:
                return refuse(f"a PUT of the new object {where} with If-None-Match: * failed")
            if put(b"osqueue probe 2", IfNoneMatch="*") is not None:
                return refuse(
                    f"a PUT of the existing object {where} with If-None-Match: * replaced it (S3 answers 412)"
                )
            wrong = hashlib.md5(secrets.token_bytes(16)).hexdigest()
            current, honoured = created, []
            for form in IF_MATCH_FORMS:
                replaced = put(b"osqueue probe 3", IfMatch=if_match_value(wrong, form))
                if replaced is None:
                    honoured.append(form)
                else:  # this form is ignored: never sent
                    current = replaced
            if not honoured:
                return refuse(f"a PUT of {where} with If-Match set to a wrong entity tag replaced it (S3 answers 412)")
            for form in honoured:
                if put(b"osqueue probe 4", IfMatch=if_match_value(current, form)) is not None:
                    forms = (form,) + tuple(f for f in honoured if f != form)
                    return EndpointConditions(self.endpoint, forms, confirmed=form)
            return refuse(
                f"a PUT of {where} with If-Match set to its own entity tag {current} failed in every form "
                f"({', '.join(honoured)})"
            )
        except _Refused as e:
            return refuse(str(e))
        finally:
            try:
                self._client.delete_object(Bucket=self._bucket, Key=full)
            except (ClientError, BotoCoreError):
                pass  # a scratch object left behind is harmless (GC deletes only batch files)

    def list(self, prefix: str) -> list[ObjectInfo]:
        from botocore.exceptions import BotoCoreError, ClientError

        validate_prefix(prefix)
        full = f"{self._prefix}/{prefix}" if self._prefix else prefix
        strip = len(self._prefix) + 1 if self._prefix else 0
        out: list[ObjectInfo] = []
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self._bucket, Prefix=full):
                for obj in page.get("Contents", []):
                    key = obj["Key"][strip:]
                    try:
                        validate_key(key)
                    except InvalidObjectKeyError:
                        continue  # not addressable through this store
                    out.append(ObjectInfo(key, int(obj.get("Size", 0)), epoch_ms(obj.get("LastModified"))))
        except (ClientError, BotoCoreError) as e:
            raise self._fail("LIST", prefix, e) from e
        return out

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            self._client.delete_object(Bucket=self._bucket, Key=full)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "NoSuchKey":
                return
            raise self._fail("DELETE", key, e) from e
        except BotoCoreError as e:
            raise self._fail("DELETE", key, e) from e

    def delete_many(self, keys: Sequence[str]) -> None:
        """Deletes ``keys`` with one DeleteObjects request per 1,000 (quiet mode: only failures come back); a
        missing key is no error. A key the server reports as not deleted raises ``StoreError`` naming it."""
        from botocore.exceptions import BotoCoreError, ClientError

        keys = list(keys)
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            try:
                reply = self._client.delete_objects(
                    Bucket=self._bucket,
                    Delete={"Objects": [{"Key": self._full(k)} for k in chunk], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as e:
                raise self._fail("DELETE", chunk[0], e) from e
            errors = [e for e in reply.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise StoreError(
                    f"{self.uri}: DeleteObjects left {len(errors)} of {len(chunk)} keys, e.g. "
                    f"'{errors[0].get('Key')}': {errors[0].get('Code')} {errors[0].get('Message')}"
                )

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if close is not None:
            close()


class _Refused(Exception):
    """The probe saw the endpoint refuse conditional PUTs outright."""


def _header(condition: Mapping[str, str]) -> str:
    return ", ".join(("If-None-Match" if k == "IfNoneMatch" else "If-Match") + f": {v}" for k, v in condition.items())
