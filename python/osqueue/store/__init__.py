"""Object stores: the few operations the queue needs, on a local disk, S3 or memory.

Keys are relative to the store root, ``/``-separated and validated by :func:`validate_key`
before any I/O, so a manifest can never make a store touch anything outside its root.

Failures raise :class:`~osqueue.errors.StoreError`. After a *conditional* write raises, the
write may or may not have been applied: callers resolve that by reading the object back
(see :mod:`osqueue.queue`).
"""

from osqueue.durations import parse_duration
from osqueue.store.endpoint_conditions import (
    IF_MATCH_QUOTED,
    IF_MATCH_UNQUOTED,
    PROBE_ATTEMPTS,
    PROBE_BACKOFF_S,
    PROBE_KEY_PREFIX,
    EndpointConditions,
    bare_etag,
    forget_endpoint_conditions,
    if_match_value,
    probed_conditions,
)
from osqueue.store.in_memory_store import InMemoryStore
from osqueue.store.local_file_system_store import LocalFileSystemStore
from osqueue.store.object_store import (
    PRECONDITION_FAILED,
    CasOutcome,
    ObjectInfo,
    ObjectStore,
    ObjectVersion,
    PreconditionFailed,
    VersionedObject,
    Written,
    delete_many,
    join_key,
    validate_key,
)
from osqueue.store.object_store_provider import PLUGGED_STORES
from osqueue.store.object_stores import open_store
from osqueue.store.s3_store import S3Store
from osqueue.store.s3_store_config import (
    S3_ACCESS_KEY,
    S3_ATTEMPTS,
    S3_CONNECT_TIMEOUT,
    S3_ENDPOINT,
    S3_PATH_STYLE,
    S3_REGION,
    S3_SECRET_KEY,
    S3_SESSION_TOKEN,
    S3_SOCKET_TIMEOUT,
    S3_SSL,
)

__all__ = [
    "parse_duration",
    "ObjectVersion",
    "VersionedObject",
    "ObjectInfo",
    "Written",
    "PreconditionFailed",
    "PRECONDITION_FAILED",
    "CasOutcome",
    "ObjectStore",
    "validate_key",
    "join_key",
    "delete_many",
    "InMemoryStore",
    "LocalFileSystemStore",
    "S3_ENDPOINT",
    "S3_ACCESS_KEY",
    "S3_SECRET_KEY",
    "S3_SESSION_TOKEN",
    "S3_PATH_STYLE",
    "S3_REGION",
    "S3_SSL",
    "S3_CONNECT_TIMEOUT",
    "S3_SOCKET_TIMEOUT",
    "S3_ATTEMPTS",
    "IF_MATCH_QUOTED",
    "IF_MATCH_UNQUOTED",
    "PROBE_KEY_PREFIX",
    "PROBE_ATTEMPTS",
    "PROBE_BACKOFF_S",
    "bare_etag",
    "if_match_value",
    "EndpointConditions",
    "probed_conditions",
    "forget_endpoint_conditions",
    "S3Store",
    "PLUGGED_STORES",
    "open_store",
]
