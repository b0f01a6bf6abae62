"""The plug-in table: URI schemes whose store lives in an optional extra (JVM: ``ObjectStoreProvider``)."""

from __future__ import annotations

# Stores whose SDK is an optional extra (``pip install 'osqueue[<extra>]'``): scheme -> (module, extra).
# Each module has ``open_store(uri, options)`` and imports its SDK at its top: it is imported only
# when its scheme is opened, so the base install needs no cloud SDK. The JVM
# finds the same stores through osqueue.store.ObjectStoreProvider, in artifacts of their own.
PLUGGED_STORES: dict[str, tuple[str, str]] = {
    **{scheme: ("osqueue.store.azure_blob_store", "azure") for scheme in ("abfss", "abfs", "wasbs", "wasb")},
    "gs": ("osqueue.store.gcs_store", "gcs"),
}
