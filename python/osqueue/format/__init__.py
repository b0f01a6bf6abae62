"""Byte formats of the queue manifest and of data batches (docs/format.md §2–§4).

Everything here is pure: bytes in, values out. Decoders raise :class:`CorruptManifestError`,
:class:`CorruptBatchError` or :class:`UnsupportedFormatVersionError` naming the object, and never
allocate by a count read from the object before checking that the bytes for it exist.

The manifest operations a producer or consumer needs on the write path work on the *raw* bytes
and are O(1) in the number of entries (:func:`append_entries`, :func:`with_epoch`) or O(removed)
(:func:`dequeue_through`): existing entries, extension bytes included, are carried byte for byte.
"""

from osqueue.format.batch_codec import BATCH_FOOTER_LEN, MAX_DECOMPRESSED_BLOCK, Compression, decode_batch, encode_batch
from osqueue.format.batch_integrity import EntryIntegrity, integrity_of, verify_entry
from osqueue.format.batch_names import (
    BATCH_SUFFIX,
    SupportsNowMs,
    SupportsRandBits,
    encode_ulid,
    is_batch_name,
    new_batch_key,
    parse_batch_ulid_ms,
)
from osqueue.format.dequeue_receipts import MAX_RECEIPTS, RECEIPTS_SUFFIX, DequeueReceipts
from osqueue.format.entry_tag import Admission, Delivered, EntryTag
from osqueue.format.incarnation import INCARNATION_SUFFIX, incarnation_of, new_incarnation_epoch, next_epoch
from osqueue.format.index_object import FoldedIndex, decode_index, decode_segment, encode_index, fold_index
from osqueue.format.manifest import MAX_SEQUENCE, MAX_START_INDEX, Manifest, ManifestEntry, MetadataItem
from osqueue.format.manifest_codec import (
    FORMAT_VERSION,
    MANIFEST_FOOTER_LEN,
    ManifestFooter,
    decode_manifest,
    empty_manifest,
    encode_entry,
    encode_manifest,
    read_manifest_footer,
)
from osqueue.format.manifest_edits import append_entries, dequeue_through, iter_entry_locations, with_epoch
from osqueue.format.manifest_head import (
    HEAD_VERSION,
    ManifestHead,
    RawHead,
    SealedTail,
    decode_head,
    encode_head,
    fanout,
    parse_head,
)
from osqueue.format.segment_names import SEGMENTS_SUFFIX
from osqueue.format.segment_ref import SegmentRef

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_FOOTER_LEN",
    "ManifestFooter",
    "empty_manifest",
    "read_manifest_footer",
    "decode_manifest",
    "encode_entry",
    "encode_manifest",
    "BATCH_FOOTER_LEN",
    "MAX_DECOMPRESSED_BLOCK",
    "Compression",
    "encode_batch",
    "decode_batch",
    "MAX_SEQUENCE",
    "MAX_START_INDEX",
    "MetadataItem",
    "ManifestEntry",
    "Manifest",
    "EntryIntegrity",
    "EntryTag",
    "Delivered",
    "Admission",
    "append_entries",
    "integrity_of",
    "verify_entry",
    "iter_entry_locations",
    "dequeue_through",
    "with_epoch",
    "INCARNATION_SUFFIX",
    "incarnation_of",
    "new_incarnation_epoch",
    "next_epoch",
    "BATCH_SUFFIX",
    "SupportsNowMs",
    "SupportsRandBits",
    "encode_ulid",
    "new_batch_key",
    "parse_batch_ulid_ms",
    "is_batch_name",
    "RECEIPTS_SUFFIX",
    "MAX_RECEIPTS",
    "DequeueReceipts",
    "HEAD_VERSION",
    "SegmentRef",
    "ManifestHead",
    "decode_head",
    "decode_segment",
    "RawHead",
    "SealedTail",
    "parse_head",
    "encode_head",
    "fanout",
    "FoldedIndex",
    "decode_index",
    "encode_index",
    "fold_index",
    "SEGMENTS_SUFFIX",
]
