"""Segment object names beside the manifest (JVM: ``SegmentNames``)."""

from __future__ import annotations

SEGMENTS_SUFFIX = ".segments"
"""Segment objects live under ``<manifest_path>.segments/``."""
