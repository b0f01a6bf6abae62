"""Where an Azure queue lives, from its hadoop-azure path (JVM: ``osqueue.store.azure.AzureLocation``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from osqueue.errors import InvalidConfigError, InvalidObjectKeyError
from osqueue.store.object_store import (
    validate_key,
)

SCHEMES = ("abfss", "abfs", "wasbs", "wasb")

_FORM = (
    "expected abfss://container@account.dfs.core.windows.net/prefix or "
    "wasbs://container@account.blob.core.windows.net/prefix"
)
_URI = re.compile(r"(?i)^(abfss|abfs|wasbs|wasb)://([^@/]*)@([^/]*)(?:/(.*))?$")
_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]$")


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
