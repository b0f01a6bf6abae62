"""Manifest and batch codecs, raw manifest operations, batch names; with hypothesis fuzzing."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator

import pytest
import ulid
from helpers import ManualClock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osqueue import format as fmt
from osqueue.errors import (
    CorruptBatchError,
    CorruptManifestError,
    InvalidConfigError,
    UnsupportedFormatVersionError,
)
from osqueue.format import (
    Compression,
    Manifest,
    ManifestEntry,
    MetadataItem,
    append_entries,
    batch_codec,
    decode_batch,
    decode_manifest,
    dequeue_through,
    empty_manifest,
    encode_batch,
    encode_manifest,
    iter_entry_locations,
    new_batch_key,
    next_epoch,
    parse_batch_ulid_ms,
    read_manifest_footer,
    with_epoch,
)

U64_MAX = (1 << 64) - 1
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies ---------------------------------------------------------------------------------

metadata_items = st.builds(
    MetadataItem,
    st.integers(0, 0x7FFFFFFF),
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.binary(max_size=12),
)
locations = st.text(min_size=0, max_size=30)


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    first = draw(st.integers(0, (1 << 63) - 40))
    count = draw(st.integers(0, 5))
    entries = [
        ManifestEntry(
            first + i,
            draw(locations),
            draw(st.lists(metadata_items, max_size=4)),
            draw(st.one_of(st.just(b""), st.binary(max_size=8))),
        )
        for i in range(count)
    ]
    next_sequence = first + count + (draw(st.integers(0, 3)) if count == 0 else 0)  # last entry is next - 1
    return Manifest(entries, next_sequence, draw(st.integers(0, U64_MAX)))


# -- manifest -----------------------------------------------------------------------------------


@FUZZ
@given(manifests())
def test_manifest_round_trip(m: Manifest) -> None:
    data = encode_manifest(m)
    assert decode_manifest(data, "k") == m
    assert len(data) >= 22


@FUZZ
@given(st.binary(max_size=200))
def test_decode_manifest_arbitrary_bytes_is_typed_error_or_exact_value(data: bytes) -> None:
    try:
        m = decode_manifest(data, "fuzz")
    except (CorruptManifestError, UnsupportedFormatVersionError) as e:
        assert "fuzz" in str(e)
        return
    # The decoder is strict, so whatever it accepts re-encodes to the same bytes.
    assert encode_manifest(m) == data


@FUZZ
@given(manifests(), st.data())
def test_decode_manifest_mutated_valid_bytes(m: Manifest, data: st.DataObject) -> None:
    raw = bytearray(encode_manifest(m))
    op = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
    i = data.draw(st.integers(0, len(raw) - 1))
    if op == "flip":
        raw[i] ^= data.draw(st.integers(1, 255))
    elif op == "truncate":
        del raw[i:]
    else:
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
    try:
        decoded = decode_manifest(bytes(raw), "mut")
    except (CorruptManifestError, UnsupportedFormatVersionError):
        return
    assert encode_manifest(decoded) == bytes(raw)


def test_empty_manifest_is_22_bytes() -> None:
    assert empty_manifest() == struct.pack("<IQQH", 0, 0, 0, 1)
    assert decode_manifest(empty_manifest(), "k") == Manifest([], 0, 0)


def test_huge_counts_do_not_allocate() -> None:
    footer = struct.pack("<IQQH", 0xFFFFFFFF, 1, 0, 1)
    with pytest.raises(CorruptManifestError, match="cannot fit"):
        decode_manifest(footer, "k")
    # An entry claiming 2^32-1 metadata items must be rejected before looping over them.
    loc = b"a"
    body = struct.pack("<QH", 0, 1) + loc + struct.pack("<I", 0xFFFFFFFF)
    data = struct.pack("<I", len(body)) + body + struct.pack("<IQQH", 1, 1, 0, 1)
    with pytest.raises(CorruptManifestError, match="metadata"):
        decode_manifest(data, "k")


def test_encode_rejects_fields_that_do_not_fit() -> None:
    with pytest.raises(InvalidConfigError):
        encode_manifest(Manifest([ManifestEntry(0, "x" * 65536, [])], 1, 0))
    with pytest.raises(InvalidConfigError):
        encode_manifest(Manifest([ManifestEntry(0, "a", []), ManifestEntry(2, "b", [])], 3, 0))
    with pytest.raises(InvalidConfigError):
        encode_manifest(Manifest([ManifestEntry(4, "a", [])], 4, 0))


def _sample() -> Manifest:
    return Manifest(
        [
            ManifestEntry(3, "ingest/a.batch", [MetadataItem(0, 1, b"m")], b"EXT"),
            ManifestEntry(4, "ingest/b.batch", []),
            ManifestEntry(5, "ingest/c.batch", [MetadataItem(0, 2, b""), MetadataItem(7, 3, b"zz")]),
        ],
        6,
        9,
    )


def test_append_entries_to_missing_manifest() -> None:
    raw, first = append_entries(None, [("ingest/x.batch", [MetadataItem(0, 5, b"p")])])
    assert first == 0
    assert decode_manifest(raw, "k") == Manifest([ManifestEntry(0, "ingest/x.batch", [MetadataItem(0, 5, b"p")])], 1, 0)


def test_append_entries_keeps_existing_bytes_and_epoch() -> None:
    old = encode_manifest(_sample())
    new, first = append_entries(old, [("ingest/d.batch", []), ("ingest/e.batch", [MetadataItem(0, 1, b"")])])
    assert first == 6
    assert new[: len(old) - 22] == old[:-22]  # existing entries (extension included) byte for byte
    m = decode_manifest(new, "k")
    assert [e.sequence for e in m.entries] == [3, 4, 5, 6, 7]
    assert m.next_sequence == 8 and m.epoch == 9
    assert m.entries[0].extension == b"EXT"


def test_append_entries_does_not_decode_existing_entries() -> None:
    # An entries region that does not decode, under a valid footer: append must not look at it
    # (the write path is O(1) in the number of entries).
    garbage = b"\xff" * 40 + struct.pack("<IQQH", 3, 10, 1, 1)
    new, first = append_entries(garbage, [("ingest/z.batch", [])])
    assert first == 10
    assert new.startswith(b"\xff" * 40)
    assert read_manifest_footer(new, "k") == fmt.ManifestFooter(4, 11, 1)


def test_append_entries_validates_the_footer() -> None:
    with pytest.raises(UnsupportedFormatVersionError):
        append_entries(struct.pack("<IQQH", 0, 0, 0, 9), [("a", [])])
    with pytest.raises(CorruptManifestError):
        append_entries(b"\x00" * 5, [("a", [])])


def test_dequeue_through_removes_a_prefix_and_keeps_the_rest_byte_for_byte() -> None:
    m = _sample()
    raw = encode_manifest(m)
    new, removed = dequeue_through(raw, 4)
    assert removed == 2
    assert decode_manifest(new, "k") == Manifest(m.entries[2:], 6, 9)
    new_all, removed_all = dequeue_through(raw, 100)
    assert removed_all == 3 and decode_manifest(new_all, "k") == Manifest([], 6, 9)
    same, none = dequeue_through(raw, 2)
    assert none == 0 and same is raw
    kept, _ = dequeue_through(raw, 2)
    assert decode_manifest(kept, "k").entries[0].extension == b"EXT"


def test_with_epoch_and_next_epoch_wrap() -> None:
    raw = encode_manifest(_sample())
    bumped = with_epoch(raw, 10)
    assert decode_manifest(bumped, "k") == Manifest(_sample().entries, 6, 10)
    assert with_epoch(None, 1) == struct.pack("<IQQH", 0, 0, 1, 1)
    assert next_epoch(0) == 1
    assert next_epoch(U64_MAX - 1) == 0  # 2^64 - 2 wraps to 0: never takes 2^64 - 1
    assert next_epoch(U64_MAX - 2) == U64_MAX - 1


def test_iter_entry_locations() -> None:
    raw = encode_manifest(_sample())
    assert list(iter_entry_locations(raw, "k")) == [(3, "ingest/a.batch"), (4, "ingest/b.batch"), (5, "ingest/c.batch")]
    assert list(iter_entry_locations(raw, "k", 5)) == [(5, "ingest/c.batch")]


# -- batches ------------------------------------------------------------------------------------


@FUZZ
@given(st.lists(st.binary(max_size=40), min_size=0, max_size=10), st.sampled_from(list(Compression)))
def test_batch_round_trip(records: list[bytes], compression: Compression) -> None:
    data = encode_batch(records, compression)
    assert decode_batch(data, "k") == records
    assert data[-7] == int(compression)
    assert struct.unpack("<IH", data[-6:]) == (len(records), 1)


@FUZZ
@given(st.binary(max_size=120))
def test_decode_batch_arbitrary_bytes_is_typed_error_or_records(data: bytes) -> None:
    try:
        records = decode_batch(data, "fuzz")
    except (CorruptBatchError, UnsupportedFormatVersionError) as e:
        assert "fuzz" in str(e)
        return
    assert isinstance(records, list)
    if data[-7] == 0:
        assert encode_batch(records, Compression.NONE) == data


@FUZZ
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=6), st.data())
def test_decode_batch_mutated_zstd(records: list[bytes], data: st.DataObject) -> None:
    raw = bytearray(encode_batch(records, Compression.ZSTD))
    i = data.draw(st.integers(0, len(raw) - 8))
    raw[i] ^= data.draw(st.integers(1, 255))
    try:
        decode_batch(bytes(raw), "mut")
    except (CorruptBatchError, UnsupportedFormatVersionError):
        pass


def test_zstd_block_is_level3_frame_with_content_size_and_checksum() -> None:
    import zstandard

    records = [b"x" * 100, b""]
    data = encode_batch(records, Compression.ZSTD)
    block = data[:-7]
    assert zstandard.frame_content_size(block) == 4 + 100 + 4
    assert zstandard.get_frame_parameters(block).has_checksum  # docs/adr/0006
    assert block == zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=True).compress(
        struct.pack("<I", 100) + b"x" * 100 + struct.pack("<I", 0)
    )


def test_decompression_bomb_is_stopped_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    import zstandard

    bomb = zstandard.ZstdCompressor(level=3).compress(b"\x00" * (4 << 20)) + struct.pack("<BIH", 1, 1, 1)
    monkeypatch.setattr(batch_codec, "MAX_DECOMPRESSED_BLOCK", 1 << 20)
    with pytest.raises(CorruptBatchError, match="2 GiB"):
        decode_batch(bomb, "bomb")


def test_empty_batch_and_empty_records() -> None:
    assert encode_batch([]) == struct.pack("<BIH", 0, 0, 1)
    assert decode_batch(encode_batch([b"", b""]), "k") == [b"", b""]


# -- batch names --------------------------------------------------------------------------------


def test_new_batch_key_encodes_the_clock_and_parses_back() -> None:
    clock = ManualClock(1767225600123)
    key = new_batch_key("ingest", clock, random.Random(1))
    assert key.startswith("ingest/") and key.endswith(".batch")
    name = key.split("/")[1][:-6]
    assert len(name) == 26 and name[0] in "01234567"
    assert parse_batch_ulid_ms(key) == 1767225600123
    # Independent check with python-ulid.
    assert ulid.ULID.from_str(name).milliseconds == 1767225600123
    assert new_batch_key("ingest", clock, random.Random(1)) == key  # deterministic with a seeded rng
    assert new_batch_key("ingest", clock) != new_batch_key("ingest", clock)


@given(st.integers(0, (1 << 48) - 1), st.integers(0, (1 << 80) - 1))
def test_ulid_encoding_matches_python_ulid(ms: int, rand: int) -> None:
    text = fmt.encode_ulid(ms, rand)
    assert text == str(ulid.ULID.from_bytes(((ms << 80) | rand).to_bytes(16, "big")))
    assert parse_batch_ulid_ms(text + ".batch") == ms


@pytest.mark.parametrize(
    "name",
    [
        "01J5T4R3KXBMZ7QV9N2WG8YDHP",  # no .batch
        "01j5t4r3kxbmz7qv9n2wg8ydhp.batch",  # lower case
        "81J5T4R3KXBMZ7QV9N2WG8YDHP.batch",  # first character above 7
        "01J5T4R3KXBMZ7QV9N2WG8YDH.batch",  # 25 characters
        "01J5T4R3KXBMZ7QV9N2WG8YDHPQ.batch",  # 27 characters
        "01J5T4R3KXBMZ7QV9N2WG8YDHI.batch",  # I is not Crockford
        "01J5T4R3KXBMZ7QV9N2WG8YDHU.batch",  # U is not Crockford
        "01J5T4R3KXBMZ7QV9N2WG8YDHP.batch.tmp",
        "x01J5T4R3KXBMZ7QV9N2WG8YDHP.batch",
    ],
)
def test_parse_batch_ulid_ms_rejects_non_batch_names(name: str) -> None:
    assert parse_batch_ulid_ms(name) is None


# ---- sink entry tags (docs/format.md §2.1) ----


@given(st.text(max_size=40), st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=26))
def test_entry_tag_round_trips(writer: str, batch: int, attempt: str) -> None:
    tag = fmt.EntryTag(writer, batch, attempt)
    assert fmt.EntryTag.decode(tag.encode()) == tag


def test_entry_tag_layout() -> None:
    raw = fmt.EntryTag("wé", 258, "A").encode()
    assert raw == b"OSQ1\x01\x03\x00w\xc3\xa9" + struct.pack("<q", 258) + b"\x01A"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x07future\x00\xff",
        b"OSQ2" + fmt.EntryTag("w", 1, "a").encode()[4:],  # other magic
        b"OSQ1\x02" + fmt.EntryTag("w", 1, "a").encode()[5:],  # other tag type
        fmt.EntryTag("w", 1, "a").encode() + b"\x00",  # trailing byte
        fmt.EntryTag("w", 1, "a").encode()[:-1],  # attempt cut short
        b"OSQ1\x01\xff\x00" + b"w" * 20,  # writer runs past the end
        b"OSQ1\x01\x01\x00\xff" + struct.pack("<qB", 1, 1) + b"a",  # writer is not UTF-8
    ],
)
def test_entry_tag_decode_ignores_anything_else(raw: bytes) -> None:
    assert fmt.EntryTag.decode(raw) is None


def test_entry_tag_encode_rejects_fields_that_do_not_fit() -> None:
    with pytest.raises(InvalidConfigError):
        fmt.EntryTag("w", 1, "a" * 256).encode()
    with pytest.raises(InvalidConfigError):
        fmt.EntryTag("w" * 65536, 1, "a").encode()
    with pytest.raises(InvalidConfigError):
        fmt.EntryTag("w", 1 << 63, "a").encode()


def test_delivered_admits_one_copy_per_writer_batch() -> None:
    d = fmt.Delivered()
    admitted = []
    for tag in [
        fmt.EntryTag("w1", 0, "a1"),
        fmt.EntryTag("w1", 0, "a1"),  # same copy: delivered whole
        None,  # untagged: always
        fmt.EntryTag("w2", 5, "x"),  # another writer has its own state
        fmt.EntryTag("w1", 0, "a2"),  # replayed copy
        fmt.EntryTag("w1", 1, "a3"),
        fmt.EntryTag("w1", 0, "a1"),  # an older batch, even the delivered copy
    ]:
        ok, d = d.admit(tag)
        admitted.append(ok)
    assert admitted == [True, True, True, True, False, True, False]
    assert d.writers == {"w1": (1, "a3"), "w2": (5, "x")}


def _tagged(sequence: int, tag: fmt.EntryTag | None) -> fmt.ManifestEntry:
    return fmt.ManifestEntry(sequence, f"ingest/{sequence}.batch", [], b"" if tag is None else tag.encode())


def test_admit_all_folds_the_reader_rule_over_entries_in_order() -> None:
    tags = [fmt.EntryTag("w1", 0, "a1"), None, fmt.EntryTag("w1", 0, "a2"), fmt.EntryTag("w1", 1, "a3")]
    admissions = list(fmt.Delivered().admit_all(_tagged(i, t) for i, t in enumerate(tags)))
    assert [(a.entry.sequence, a.admitted) for a in admissions] == [(0, True), (1, True), (2, False), (3, True)]
    assert admissions[2].after.writers == {"w1": (0, "a1")}  # a skipped copy leaves the state as it was
    assert admissions[-1].after.writers == {"w1": (1, "a3")}
    # From a state carried over (a partition planned after the first copy): the replay is skipped.
    resumed = fmt.Delivered({"w1": (0, "a1")}).admit_all([_tagged(2, tags[2])])
    assert [a.admitted for a in resumed] == [False]


def test_admit_all_reads_one_entry_per_admission() -> None:
    pulled: list[int] = []

    def entries() -> Iterator[fmt.ManifestEntry]:
        for i in range(3):
            pulled.append(i)
            yield _tagged(i, None)

    first = next(fmt.Delivered().admit_all(entries()))
    assert first.entry.sequence == 0 and pulled == [0]  # lazy: a consumer stopping early reads no further


# -- issue 6: the mutation cases the JVM property suite covers (DecoderPropertiesSuite) ---------

_MUTATIONS = ["flip", "flips", "truncate_end", "truncate_start", "insert", "delete", "huge_field"]
_HUGE = [U64_MAX, (1 << 63) - 1, 1 << 63, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFF, 0x7FFFFFF0]


def _mutate(raw: bytes, data: st.DataObject) -> bytes:
    """One mutation of ``raw``: bit flips, truncation at either end, insertion, deletion, or a
    2/4/8-byte field overwritten with a huge value (the out-of-memory candidates)."""
    b = bytearray(raw)
    n = len(b)
    op = data.draw(st.sampled_from(_MUTATIONS))
    if op in ("flip", "flips") and n:
        for _ in range(1 if op == "flip" else data.draw(st.integers(1, 8))):
            b[data.draw(st.integers(0, n - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif op == "truncate_end":
        del b[data.draw(st.integers(0, n)) :]
    elif op == "truncate_start":
        del b[: data.draw(st.integers(0, n))]
    elif op == "insert":
        i = data.draw(st.integers(0, n))
        b[i:i] = data.draw(st.binary(min_size=1, max_size=16))
    elif op == "delete":
        i = data.draw(st.integers(0, n))
        del b[i : i + data.draw(st.integers(1, 16))]
    elif op == "huge_field":
        width = data.draw(st.sampled_from([2, 4, 8]))
        if n >= width:
            i = data.draw(st.integers(0, n - width))
            v = data.draw(st.sampled_from(_HUGE)) & ((1 << (8 * width)) - 1)
            b[i : i + width] = v.to_bytes(width, "little")
    return bytes(b)


def _bounded(fn, *args):  # type: ignore[no-untyped-def]
    """Runs one decode and fails if it takes more than 5 s (a hang or a huge allocation)."""
    import time

    t0 = time.monotonic()
    try:
        return fn(*args)
    finally:
        assert time.monotonic() - t0 < 5.0, f"{fn.__name__} took {time.monotonic() - t0:.1f}s"


@st.composite
def manifests_with_tags(draw: st.DrawFn) -> Manifest:
    """Manifests whose entries carry sink tags (docs/format.md §2.1) or arbitrary extension bytes."""
    import dataclasses

    m = draw(manifests())
    entries = [
        dataclasses.replace(
            e,
            extension=fmt.EntryTag(
                draw(st.text(max_size=10)), draw(st.integers(0, (1 << 63) - 1)), draw(st.text(min_size=1, max_size=26))
            ).encode(),
        )
        if draw(st.booleans())
        else e
        for e in m.entries
    ]
    return Manifest(entries, m.next_sequence, m.epoch)


@FUZZ
@given(manifests_with_tags(), st.data())
def test_decode_manifest_mutations_all_kinds(m: Manifest, data: st.DataObject) -> None:
    raw = _mutate(encode_manifest(m), data)
    try:
        decoded = _bounded(decode_manifest, raw, "mut")
    except (CorruptManifestError, UnsupportedFormatVersionError) as e:
        assert "mut" in str(e)
        return
    assert encode_manifest(decoded) == raw


@FUZZ
@given(manifests_with_tags(), st.data(), st.integers(-1, 50))
def test_manifest_edits_on_mutated_bytes_are_typed(m: Manifest, data: st.DataObject, through: int) -> None:
    raw = _mutate(encode_manifest(m), data)
    for op in (
        lambda: dequeue_through(raw, max(through, 0), "mut"),
        lambda: append_entries(raw, [("ingest/x.batch", [])], "mut"),
        lambda: list(iter_entry_locations(raw, "mut")),
    ):
        try:
            op()
        except (CorruptManifestError, UnsupportedFormatVersionError):
            pass


@FUZZ
@given(
    st.binary(max_size=200),
    st.integers(0, 12),
    st.sampled_from([0, 1, 5, 0xFFFFFFFF, 0x7FFFFFFF]),
    st.sampled_from([0, 1, 20, (1 << 63) - 1, U64_MAX]),
)
def test_decode_manifest_arbitrary_entries_before_a_valid_footer(body: bytes, _: int, count: int, nxt: int) -> None:
    raw = body + struct.pack("<IQQH", count, nxt, 0, 1)
    try:
        decoded = _bounded(decode_manifest, raw, "fuzz")
    except (CorruptManifestError, UnsupportedFormatVersionError):
        return
    assert encode_manifest(decoded) == raw


@FUZZ
@given(
    st.lists(st.one_of(st.just(b""), st.binary(max_size=64)), max_size=12),
    st.sampled_from(list(Compression)),
    st.data(),
)
def test_decode_batch_mutations_all_kinds(records: list[bytes], compression: Compression, data: st.DataObject) -> None:
    raw = _mutate(encode_batch(records, compression), data)
    try:
        got = _bounded(decode_batch, raw, "mut")
    except (CorruptBatchError, UnsupportedFormatVersionError) as e:
        assert "mut" in str(e)
        return
    assert isinstance(got, list)


@FUZZ
@given(
    st.binary(max_size=200), st.sampled_from([0, 1]), st.sampled_from([0, 1, 3, 0x7FFFFFFF, 0xFFFFFFFF]), st.booleans()
)
def test_decode_batch_arbitrary_block_before_a_valid_footer(body: bytes, comp: int, count: int, magic: bool) -> None:
    block = (b"\x28\xb5\x2f\xfd" + body) if magic else body
    try:
        _bounded(decode_batch, block + struct.pack("<BIH", comp, count, 1), "fuzz")
    except (CorruptBatchError, UnsupportedFormatVersionError):
        pass


def test_zstd_frame_claiming_a_huge_content_size_or_window_does_not_allocate_it() -> None:
    import zstandard

    block = struct.pack("<I", 3) + b"abc"
    frame = zstandard.ZstdCompressor(level=3, write_content_size=True).compress(block)
    fhd = frame[4]
    single = bool(fhd & 0x20)
    fcs_len = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fhd >> 6]
    blocks = frame[5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3] + fcs_len :]
    chk = fhd & 0x04
    magic = frame[:4]
    claims = [
        magic + bytes([(3 << 6) | chk, 0x70]) + struct.pack("<Q", (1 << 63) - 1) + blocks,
        magic + bytes([(3 << 6) | 0x20 | chk]) + struct.pack("<Q", U64_MAX) + blocks,
        magic + bytes([(3 << 6) | 0x20 | chk]) + struct.pack("<Q", 1 << 32) + blocks,
        magic + bytes([chk, 0xF8]) + blocks,  # a 2^41-byte window
    ]
    for c in claims:
        try:
            got = _bounded(decode_batch, c + struct.pack("<BIH", 1, 1, 1), "claim")
        except (CorruptBatchError, UnsupportedFormatVersionError):
            continue
        assert got == [b"abc"]


def test_concatenated_zstd_frames_decode_to_the_concatenated_blocks() -> None:
    import zstandard

    a = encode_batch([b"x", b""], Compression.NONE)[:-7]
    b = encode_batch([b"yz"], Compression.NONE)[:-7]
    z = zstandard.ZstdCompressor(level=3).compress(a) + zstandard.ZstdCompressor(level=1).compress(b)
    assert decode_batch(z + struct.pack("<BIH", 1, 3, 1), "k") == [b"x", b"", b"yz"]


def test_start_index_of_2_pow_31_or_more_is_refused_by_the_writer_and_the_reader() -> None:
    """docs/format.md §2, as on the JVM (issue 14 item 7): Python used to write what the JVM rejects."""
    with pytest.raises(InvalidConfigError, match="below 2\\^31"):
        fmt.encode_entry(0, "ingest/a.batch", [MetadataItem(1 << 31, 0, b"")])
    ok = encode_manifest(Manifest([ManifestEntry(0, "ingest/a.batch", [MetadataItem((1 << 31) - 1, 0, b"")])], 1, 0))
    assert decode_manifest(ok, "m").entries[0].metadata[0].start_index == (1 << 31) - 1
    at = ok.index(struct.pack("<I", (1 << 31) - 1))
    bad = ok[:at] + struct.pack("<I", 1 << 31) + ok[at + 4 :]
    with pytest.raises(CorruptManifestError, match="start_index is out of range"):
        decode_manifest(bad, "m")
