"""Queue incarnations: the epoch's high bits, and the object recording them (JVM: ``Incarnation``)."""

from __future__ import annotations

import secrets

from osqueue.format.manifest_codec import U64_MAX

INCARNATION_SUFFIX = ".incarnation"
"""``<manifest>.incarnation``: the incarnation the last consumer initialized (docs/format.md §5.2)."""


def incarnation_of(epoch: int) -> int:
    """The manifest incarnation an epoch belongs to: its high 32 bits (docs/format.md §5.2).

    0 for a manifest created by the reference implementation or an osqueue before incarnations.
    """
    return epoch >> 32


def new_incarnation_epoch() -> int:
    """The epoch of a manifest being created: a fresh random incarnation in [1, 2^31) in the high
    32 bits, 0 in the low ones (kept below 2^63 so the JVM's signed Long holds it). Not drawn from
    an injected ``random.Random``: two seeded test queues must not share an incarnation."""
    return (1 + secrets.randbelow((1 << 31) - 1)) << 32


def next_epoch(epoch: int) -> int:
    """The epoch a consumer takes at ``initialize``: ``epoch + 1``, wrapping past 2^64 − 2 to 0."""
    nxt = epoch + 1
    return 0 if nxt >= U64_MAX else nxt
