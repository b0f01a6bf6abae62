"""The Python source's offset: the JVM source's (``OsqueueSourceOffset``, format version 1), so a
checkpoint names the queue, its id, the next sequence, the incarnation, the sink copies delivered per
writer and the named subscription that read (docs/adr/0005)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from osqueue.format.entry_tag import Delivered
from osqueue.spark_source.options import OsqueueSparkError

OFFSET_VERSION = 1


def _reader_name(subscription: str | None) -> str:
    return "the unnamed reader" if subscription is None else f"subscription '{subscription}'"


@dataclass(frozen=True)
class SourceOffset:
    """The JVM source's offset (``OsqueueSourceOffset``, format version 1): queue, queue id, next
    sequence, incarnation and the sink copies delivered per writer."""

    queue: str
    queue_id: str
    next_sequence: int
    incarnation: int | None
    delivered: Delivered
    subscription: str | None = None
    subscription_incarnation: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": OFFSET_VERSION,
            "queue": self.queue,
            "queueId": self.queue_id,
            "nextSequence": self.next_sequence,
        }
        if self.incarnation is not None:
            out["incarnation"] = self.incarnation
        if self.delivered.writers:
            out["writers"] = {w: [b, a] for w, (b, a) in sorted(self.delivered.writers.items())}
        if self.subscription is not None:
            out["subscription"] = self.subscription
        if self.subscription_incarnation is not None:
            out["subscriptionIncarnation"] = self.subscription_incarnation
        return out

    @staticmethod
    def parse(offset: Any, own_queue_id: str, identity: str, own_subscription: str | None = None) -> SourceOffset:
        """``offset`` read back from Spark; one of another queue (OSQUEUE_FOREIGN_CHECKPOINT) or of another
        reader of this queue (OSQUEUE_FOREIGN_SUBSCRIPTION) is refused, as on the JVM."""

        def bad(reason: str) -> OsqueueSparkError:
            return OsqueueSparkError(
                "OSQUEUE_BAD_OFFSET", f"cannot read offset '{json.dumps(offset)}' from the checkpoint: {reason}"
            )

        if not isinstance(offset, dict) or not {"version", "queue", "queueId", "nextSequence"} <= offset.keys():
            raise bad("expected {version, queue, queueId, nextSequence}")
        if offset["version"] != OFFSET_VERSION:
            raise bad(f"offset format version {offset['version']} is not read by the Python data source")
        nxt = offset["nextSequence"]
        if not isinstance(nxt, int) or nxt < 0:
            raise bad("nextSequence is not a sequence")
        if offset["queueId"] != own_queue_id:
            raise OsqueueSparkError(
                "OSQUEUE_FOREIGN_CHECKPOINT",
                f"the checkpoint's offsets belong to queue '{offset['queue']}' (id {offset['queueId']}), but this "
                f"query reads '{identity}' (id {own_queue_id}). The queue was recreated, or the checkpoint is "
                "another query's: use a new checkpoint location for this queue.",
            )
        subscription = offset.get("subscription")
        if subscription is not None and not isinstance(subscription, str):
            raise bad(f"subscription {json.dumps(subscription)} is not a subscription name")
        if subscription != own_subscription:
            raise OsqueueSparkError(
                "OSQUEUE_FOREIGN_SUBSCRIPTION",
                f"the checkpoint's offsets of queue '{identity}' were written by {_reader_name(subscription)}, but this "
                f"query reads it as {_reader_name(own_subscription)}: each subscription needs its own checkpoint "
                "location.",
            )
        sub_incarnation = offset.get("subscriptionIncarnation")
        if sub_incarnation is not None and not isinstance(sub_incarnation, int):
            raise bad(f"subscriptionIncarnation {json.dumps(sub_incarnation)} is not an incarnation")
        writers = {str(w): (int(v[0]), str(v[1])) for w, v in dict(offset.get("writers", {})).items()}
        return SourceOffset(
            offset["queue"],
            offset["queueId"],
            nxt,
            offset.get("incarnation"),
            Delivered(writers),
            subscription,
            sub_incarnation,
        )
