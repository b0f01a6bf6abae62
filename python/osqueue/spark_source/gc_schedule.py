"""The Python source's GC (JVM: ``GcSchedule``): once :meth:`GcSchedule.start` is called (when the
stream takes the queue over), one cycle at once and one every ``gcInterval`` after, on a daemon thread
of the driver's stream-reader worker, so short and AvailableNow runs collect too. A failed cycle is
logged and the next one runs. :meth:`GcSchedule.stop` lets a running cycle finish (up to
:data:`STOP_WAIT_S`) and runs no more."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from osqueue.clock import Clock
from osqueue.gc.garbage_collector import GarbageCollector, GcResult
from osqueue.store.object_store import ObjectStore

_log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0


class GcSchedule:
    """Runs ``cycle`` at once and every ``interval_s`` after, until stopped."""

    def __init__(self, queue: str, interval_s: float, cycle: Callable[[], GcResult]) -> None:
        self.queue = queue
        self.interval_s = interval_s
        self._cycle = cycle
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"osqueue-gc-{self.queue}", daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        """Started and not yet stopped."""
        return self._thread is not None and self._thread.is_alive() and not self._stopped.is_set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                r = self._cycle()
                if r.deleted or r.failed:
                    _log.info("osqueue GC on '%s': deleted %d, failed %d", self.queue, len(r.deleted), len(r.failed))
            except Exception as e:  # the next cycle runs
                _log.warning("osqueue GC cycle on '%s' failed; retrying in %s s: %s", self.queue, self.interval_s, e)
            self._stopped.wait(self.interval_s)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S)


def for_source(
    store: ObjectStore,
    manifest_path: str,
    data_path_prefix: str,
    identity: str,
    enabled: bool,
    interval_s: float,
    grace_period_s: float,
    clock: Clock,
) -> GcSchedule | None:
    """The schedule of a stream's options, or None with ``gc=false``."""
    if not enabled:
        return None
    collector = GarbageCollector(store, manifest_path, data_path_prefix, grace_period_s, clock)
    return GcSchedule(identity, interval_s, collector.run_once)
