"""Batch file names: ULIDs under the data prefix (JVM: ``BatchNames``)."""

from __future__ import annotations

import re
import secrets
from typing import Protocol

from osqueue.errors import InvalidConfigError

# Batch names (ULIDs)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_INDEX = {c: i for i, c in enumerate(_CROCKFORD)}
_BATCH_NAME = re.compile(r"([0-7][0-9A-HJKMNP-TV-Z]{25})\.batch")
BATCH_SUFFIX = ".batch"


class SupportsNowMs(Protocol):
    """Anything with a wall clock in milliseconds (see :class:`osqueue.clock.Clock`)."""

    def now_ms(self) -> int: ...


class SupportsRandBits(Protocol):
    """A source of random bits, like :class:`random.Random`."""

    def getrandbits(self, k: int, /) -> int: ...


def encode_ulid(time_ms: int, randomness: int) -> str:
    """Encodes a ULID: 48 bits of ms time and 80 random bits as 26 Crockford base32 characters."""
    if not 0 <= time_ms < (1 << 48):
        raise InvalidConfigError("time_ms", time_ms, "a ULID time is a 48-bit millisecond count")
    if not 0 <= randomness < (1 << 80):
        raise InvalidConfigError("randomness", randomness, "ULID randomness is 80 bits")
    value = (time_ms << 80) | randomness
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_batch_key(prefix: str, clock: SupportsNowMs, rng: SupportsRandBits | None = None) -> str:
    """A fresh batch key ``<prefix>/<ULID>.batch`` whose ULID time is ``clock.now_ms()``.

    Args:
        prefix: The data path prefix (may be empty).
        clock: Gives the creation time.
        rng: Gives the 80 random bits; the OS's secure source when None.
    """
    bits = rng.getrandbits(80) if rng is not None else secrets.randbits(80)
    name = encode_ulid(clock.now_ms(), bits) + BATCH_SUFFIX
    p = prefix.strip("/")
    return f"{p}/{name}" if p else name


def parse_batch_ulid_ms(name: str) -> int | None:
    """The creation time (ms) of a batch name ``<ULID>.batch``, or None if it is not one.

    Only the last ``/``-separated segment of ``name`` is looked at. The ULID must be exactly 26
    upper-case Crockford base32 characters whose first one is ``0``–``7``.
    """
    last = name.rsplit("/", 1)[-1]
    m = _BATCH_NAME.fullmatch(last)
    if m is None:
        return None
    value = 0
    for c in m.group(1)[:10]:
        value = (value << 5) | _CROCKFORD_INDEX[c]
    return value


def is_batch_name(name: str) -> bool:
    """Whether the last segment of ``name`` is a ``<ULID>.batch`` name."""
    return parse_batch_ulid_ms(name) is not None
