"""Which conditional writes an endpoint honours, probed once per endpoint (JVM: ``EndpointConditions``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from osqueue.errors import ConditionalWritesNotHonouredError, StoreError

# What an S3 endpoint does with conditional writes (docs/format.md §8): learned by a probe before
# the first conditional write to an endpoint, kept per endpoint for the life of the process.

IF_MATCH_QUOTED = "quoted"  # If-Match: "<hex>", as S3 returns ETags (AWS, LocalStack, moto)
IF_MATCH_UNQUOTED = "unquoted"  # If-Match: <hex> (Ceph RGW matches only this form)
IF_MATCH_FORMS = (IF_MATCH_QUOTED, IF_MATCH_UNQUOTED)
PROBE_KEY_PREFIX = ".osqueue-probe-"
PROBE_ATTEMPTS = 4
"""Probe runs before a store error of the probe is reported; the wait doubles from PROBE_BACKOFF_S."""
PROBE_BACKOFF_S = 0.2


def bare_etag(tag: str) -> str:
    """An entity tag without its quotes (and weak ``W/`` mark): for comparing tags."""
    t = tag.strip()
    if t.startswith("W/"):
        t = t[2:]
    if len(t) >= 2 and t[0] == '"' and t[-1] == '"':
        t = t[1:-1]
    return t


def if_match_value(tag: str, form: str) -> str:
    """The ``If-Match`` header value for ``tag`` in ``form`` (quoted or unquoted)."""
    bare = bare_etag(tag)
    return f'"{bare}"' if form == IF_MATCH_QUOTED else bare


class EndpointConditions:
    """What one endpoint does with conditional writes.

    Attributes:
        endpoint: The endpoint.
        if_match_forms: The ``If-Match`` forms that refuse a wrong tag, the one that matched
            the object's own tag first (the form sent); empty when refused.
        refusal: Why the endpoint is refused, or None.
    """

    def __init__(
        self, endpoint: str, if_match_forms: tuple[str, ...], refusal: str | None = None, confirmed: str | None = None
    ) -> None:
        self.endpoint = endpoint
        self.if_match_forms = if_match_forms
        self.refusal = refusal
        self.confirmed = confirmed
        """The form a replace with the object's own tag last landed in (the probe's step 4, or a write): the
        server takes it, so a 412 in it is a conflict (the form rule then checks only every 4th in a row)."""

    @property
    def if_match_form(self) -> str:
        return self.if_match_forms[0]

    def learned(self, form: str) -> None:
        """``form`` matched where the current one did not: send it from now on."""
        self.if_match_forms = (form,) + tuple(f for f in self.if_match_forms if f != form)


_endpoint_conditions: dict[str, EndpointConditions] = {}
_endpoint_conditions_lock = threading.Lock()  # held during a probe: one probe per endpoint


def probed_conditions(
    endpoint: str,
    probe: Callable[[], EndpointConditions],
    *,
    conclusive: Callable[[StoreError], bool] = lambda e: False,
) -> EndpointConditions:
    """What ``endpoint`` does with conditional writes: probed once per process and remembered.

    A request of the probe that fails (5xx, I/O) runs the probe again on a new scratch object: a
    store error during the probe is no verdict, and a caller's retry budget covers its own write,
    not this one-off check. Every store with conditional writes (S3, GCS, Azure) goes through here.

    Args:
        probe: Runs the store's probe once.
        conclusive: A probe error not worth retrying (e.g. a missing bucket).

    Raises:
        ConditionalWritesNotHonouredError: The endpoint does not honour them.
        StoreError: The probe kept failing (nothing was learned; the next call tries again).
    """
    found = _endpoint_conditions.get(endpoint)
    if found is None:
        with _endpoint_conditions_lock:
            found = _endpoint_conditions.get(endpoint)
            if found is None:
                for attempt in range(1, PROBE_ATTEMPTS + 1):
                    try:
                        found = probe()
                        break
                    except StoreError as e:
                        if attempt == PROBE_ATTEMPTS or conclusive(e):
                            raise
                        time.sleep(PROBE_BACKOFF_S * 2 ** (attempt - 1))
                assert found is not None
                _endpoint_conditions[endpoint] = found
    if found.refusal is not None:
        raise ConditionalWritesNotHonouredError(found.endpoint, found.refusal)
    return found


def forget_endpoint_conditions(endpoint: str | None = None) -> None:
    """Drops what was learned about ``endpoint`` (all endpoints if None), so the next conditional
    write probes again (tests; a server that was reconfigured)."""
    with _endpoint_conditions_lock:
        if endpoint is None:
            _endpoint_conditions.clear()
        else:
            _endpoint_conditions.pop(endpoint, None)
