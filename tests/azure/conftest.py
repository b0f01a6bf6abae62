"""azurite for the Azure store's tests: one server per test session, a fresh container per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .support import Azurite, run_azurite


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    with run_azurite() as server:
        yield server


@pytest.fixture
def container(azurite: Azurite) -> str:
    return azurite.new_container()


@pytest.fixture
def azure_store(azurite: Azurite, container: str) -> Iterator[Any]:
    from osqueue.store import open_store

    store = open_store(azurite.uri(container, "queues/q1"), azurite.options)
    yield store
    store.close()
