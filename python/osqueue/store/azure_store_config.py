"""The Azure store's ``fs.azure.*`` options and credentials (JVM: ``osqueue.store.azure.AzureStoreConfig``)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from osqueue.errors import InvalidConfigError
from osqueue.store.azure_location import AzureLocation

ENDPOINT = "fs.azure.blob.endpoint"
"""The Blob endpoint, replacing the one the path's host names (azurite, a private endpoint)."""
AUTH_TYPE = "fs.azure.account.auth.type"
ACCOUNT_KEY = "fs.azure.account.key"
SAS_FIXED_TOKEN = "fs.azure.sas.fixed.token"
CLIENT_ID = "fs.azure.account.oauth2.client.id"
CLIENT_SECRET = "fs.azure.account.oauth2.client.secret"
CLIENT_ENDPOINT = "fs.azure.account.oauth2.client.endpoint"
MAX_RETRIES = "fs.azure.io.retry.max.retries"
_TOKEN_ENDPOINT = re.compile(r"^(https://[^/]+)/([^/]+)/oauth2/(?:v2\.0/)?token/?$")


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


def _raise(e: Exception) -> Any:
    raise e


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


def azure_endpoint(options: Mapping[str, Any], location: AzureLocation) -> str:
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


def azure_max_tries(options: Mapping[str, Any]) -> int:
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
