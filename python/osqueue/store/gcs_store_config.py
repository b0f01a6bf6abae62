"""The GCS store's ``fs.gs.*`` options and credentials (JVM: ``osqueue.store.gcs.GcsStoreConfig``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from osqueue.durations import parse_duration
from osqueue.errors import InvalidConfigError

ROOT_URL = "fs.gs.storage.root.url"
SERVICE_PATH = "fs.gs.storage.service.path"
PROJECT_ID = "fs.gs.project.id"
AUTH_TYPE = "fs.gs.auth.type"
JSON_KEYFILE = "fs.gs.auth.service.account.json.keyfile"
EMAIL = "fs.gs.auth.service.account.email"
PRIVATE_KEY_ID = "fs.gs.auth.service.account.private.key.id"
PRIVATE_KEY = "fs.gs.auth.service.account.private.key"
CONNECT_TIMEOUT = "fs.gs.http.connect-timeout"
READ_TIMEOUT = "fs.gs.http.read-timeout"
MAX_RETRY = "fs.gs.http.max.retry"
# Options of the GCS connector that pick an identity we cannot reproduce: refused, by name.
UNSUPPORTED = (
    "fs.gs.auth.access.token.provider",
    "fs.gs.auth.access.token.provider.impl",
    "fs.gs.auth.impersonation.service.account",
    "fs.gs.auth.service.account.keyfile",
)


def gcs_option(options: Mapping[str, Any], name: str) -> str | None:
    for key in (name, f"spark.hadoop.{name}"):
        if key in options and options[key] is not None and str(options[key]).strip():
            return str(options[key]).strip()
    return None


def gcs_timeout(options: Mapping[str, Any], name: str, default: float) -> float:
    value = gcs_option(options, name)
    if value is None:
        return default
    seconds = parse_duration(name, value)
    return seconds if seconds > 0 else 365 * 86400.0  # the connector's 0: no timeout


def gcs_credentials(options: Mapping[str, Any]) -> Any:
    """The credentials the options name, or None for Application Default Credentials."""
    for name in UNSUPPORTED:
        value = gcs_option(options, name)
        if value is not None:
            raise InvalidConfigError(
                name,
                value,
                "osqueue talks to GCS through its own client and cannot use this way of authenticating; "
                f"set {AUTH_TYPE} to SERVICE_ACCOUNT_JSON_KEYFILE with {JSON_KEYFILE}, give {EMAIL} and {PRIVATE_KEY}, "
                "or leave the auth options unset to use Application Default Credentials",
            )
    from google.auth.credentials import AnonymousCredentials
    from google.oauth2 import service_account

    keyfile, email, key = (
        gcs_option(options, JSON_KEYFILE),
        gcs_option(options, EMAIL),
        gcs_option(options, PRIVATE_KEY),
    )
    if key is not None and email is None:
        raise InvalidConfigError(EMAIL, "", f"{PRIVATE_KEY} is set, so the service account's email is required too")
    if email is not None and key is None and keyfile is None:
        raise InvalidConfigError(
            PRIVATE_KEY, "", f"{EMAIL} is set, so the service account's private key is required too"
        )

    def from_keyfile() -> Any:
        assert keyfile is not None
        if not os.access(keyfile, os.R_OK):
            raise InvalidConfigError(
                JSON_KEYFILE, keyfile, "the service account JSON key file does not exist or cannot be read"
            )
        try:
            return service_account.Credentials.from_service_account_file(keyfile)
        except (ValueError, KeyError) as e:
            raise InvalidConfigError(JSON_KEYFILE, keyfile, f"not a service account JSON key file: {e}") from e

    def inline() -> Any:
        info = {
            "client_email": email,
            "private_key": str(key).replace("\\n", "\n"),
            "private_key_id": gcs_option(options, PRIVATE_KEY_ID),
            "token_uri": "https://oauth2.googleapis.com/token",
        }
        try:
            return service_account.Credentials.from_service_account_info(info)
        except (ValueError, KeyError) as e:
            raise InvalidConfigError(PRIVATE_KEY, "<private key>", f"not a PKCS#8 private key: {e}") from e

    auth = gcs_option(options, AUTH_TYPE)
    kind = auth.upper() if auth else None
    if kind in ("APPLICATION_DEFAULT", "COMPUTE_ENGINE"):
        return None
    if kind == "UNAUTHENTICATED":
        return AnonymousCredentials()
    if kind == "SERVICE_ACCOUNT_JSON_KEYFILE":
        if keyfile is not None:
            return from_keyfile()
        if email is not None:
            return inline()
        raise InvalidConfigError(
            JSON_KEYFILE, "", f"{AUTH_TYPE} is SERVICE_ACCOUNT_JSON_KEYFILE, so the key file's path is required"
        )
    if kind is not None:
        raise InvalidConfigError(
            AUTH_TYPE,
            auth,
            "expected APPLICATION_DEFAULT, COMPUTE_ENGINE, SERVICE_ACCOUNT_JSON_KEYFILE or UNAUTHENTICATED",
        )
    if keyfile is not None:
        return from_keyfile()
    if email is not None:
        return inline()
    return None


def auth_value(options: Mapping[str, Any]) -> str:
    return gcs_option(options, AUTH_TYPE) or ""
