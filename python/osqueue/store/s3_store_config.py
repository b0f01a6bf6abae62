"""The S3 store's options (Hadoop S3A keys) and its client (JVM: ``S3StoreConfig``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from osqueue.durations import parse_duration
from osqueue.errors import InvalidConfigError

# S3

S3_ENDPOINT = "fs.s3a.endpoint"
S3_ACCESS_KEY = "fs.s3a.access.key"
S3_SECRET_KEY = "fs.s3a.secret.key"
S3_SESSION_TOKEN = "fs.s3a.session.token"
S3_PATH_STYLE = "fs.s3a.path.style.access"
S3_REGION = "fs.s3a.endpoint.region"
S3_SSL = "fs.s3a.connection.ssl.enabled"
S3_CONNECT_TIMEOUT = "fs.s3a.connection.establish.timeout"
S3_SOCKET_TIMEOUT = "fs.s3a.connection.timeout"
S3_ATTEMPTS = "fs.s3a.attempts.maximum"


def _parse_bool(option: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise InvalidConfigError(option, value, "use true or false")


def _parse_retries(value: object) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        n = -1
    if n < 0:
        raise InvalidConfigError(S3_ATTEMPTS, value, "expected a whole number of retries >= 0")
    return n


def make_s3_client(options: Mapping[str, Any] | None) -> Any:
    import boto3
    from botocore.config import Config

    opts = {str(k).lower(): v for k, v in (options or {}).items()}
    endpoint = opts.get(S3_ENDPOINT)
    if endpoint is not None:
        endpoint = str(endpoint).strip()
        if endpoint and "://" not in endpoint:
            endpoint = ("https://" if _parse_bool(S3_SSL, opts.get(S3_SSL, True)) else "http://") + endpoint
        if not endpoint:
            endpoint = None
    path_style = _parse_bool(S3_PATH_STYLE, opts.get(S3_PATH_STYLE, False))
    access_key = opts.get(S3_ACCESS_KEY)
    secret_key = opts.get(S3_SECRET_KEY)
    if (access_key is None) != (secret_key is None):
        missing = S3_SECRET_KEY if secret_key is None else S3_ACCESS_KEY
        raise InvalidConfigError(missing, "", f"set both {S3_ACCESS_KEY} and {S3_SECRET_KEY}, or neither")
    session = boto3.session.Session()
    region = opts.get(S3_REGION) or session.region_name or "us-east-1"
    config_args: dict[str, Any] = {
        "s3": {"addressing_style": "path" if path_style else "auto"},
        # 3 attempts per request by default; fs.s3a.attempts.maximum counts retries, as in S3A. A
        # retried conditional PUT that then fails its precondition is an unknown outcome (_conditional).
        "retries": {
            "mode": "standard",
            "total_max_attempts": _parse_retries(opts[S3_ATTEMPTS]) + 1 if S3_ATTEMPTS in opts else 3,
        },
        # The same keys and defaults as the JVM store (S3StoreConfig): 10 s to connect, 60 s per read.
        "connect_timeout": parse_duration(S3_CONNECT_TIMEOUT, opts[S3_CONNECT_TIMEOUT])
        if S3_CONNECT_TIMEOUT in opts
        else 10,
        "read_timeout": parse_duration(S3_SOCKET_TIMEOUT, opts[S3_SOCKET_TIMEOUT]) if S3_SOCKET_TIMEOUT in opts else 60,
    }
    try:
        config = Config(request_checksum_calculation="when_required", **config_args)
    except TypeError:  # older botocore
        config = Config(**config_args)
    kwargs: dict[str, Any] = {"region_name": str(region), "config": config}
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    if access_key is not None:
        kwargs["aws_access_key_id"] = str(access_key)
        kwargs["aws_secret_access_key"] = str(secret_key)
        token = opts.get(S3_SESSION_TOKEN)
        if token:
            kwargs["aws_session_token"] = str(token)
    return session.client("s3", **kwargs)
