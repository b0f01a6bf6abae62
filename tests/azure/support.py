"""azurite for the Azure store's tests (tests/azure/azurite_server.py, state in a temp dir it removes)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.s3.fixtures import stop_server

from . import azurite_server

HERE = Path(__file__).resolve().parent


@dataclass
class Azurite:
    endpoint: str
    account: str
    account_key: str

    @property
    def host(self) -> str:
        """The host a queue path names: abfss://<container>@<host>/prefix."""
        return f"{self.account}.dfs.core.windows.net"

    @property
    def options(self) -> dict[str, str]:
        """The fs.azure.* options a Spark user would set for this server."""
        return {"fs.azure.blob.endpoint": self.endpoint, f"fs.azure.account.key.{self.host}": self.account_key}

    def service(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            self.endpoint, credential={"account_name": self.account, "account_key": self.account_key}
        )

    def new_container(self) -> str:
        name = f"osq-{uuid.uuid4().hex[:20]}"
        with self.service() as service:
            service.create_container(name)
        return name

    def uri(self, container: str, prefix: str = "q") -> str:
        return f"abfss://{container}@{self.host}/{prefix}"


def missing_reason() -> str | None:
    program = azurite_server.azurite_program()
    if not Path(program).exists():
        return f"azurite is not installed ({program}): run .ci/setup.sh, which installs it with npm"
    try:
        import azure.storage.blob  # noqa: F401
    except ImportError:
        return "the azure extra is not installed: pip install 'osqueue[azure]'"
    return None


@contextlib.contextmanager
def run_azurite() -> Iterator[Azurite]:
    reason = missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "azurite_server.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                proc.wait(30)
                err.seek(0)
                raise RuntimeError(f"azurite_server.py exited {proc.returncode}: {err.read().decode(errors='replace')}")
            info = json.loads(line)
            yield Azurite(info["endpoint"], info["account"], info["account_key"])
        finally:
            stop_server(proc)
