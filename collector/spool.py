"""A durable on-disk queue of batches waiting for the service: written before sending, removed after the ack.

Layout of the spool directory:

- ``<sequence>.seg`` segment files (sequence: 20 zero-padded digits), each a run of records. A record is a
  16-byte header, ``struct`` format ``>4sIII``: the magic ``b"GFS1"``, the payload length in bytes, the CRC-32
  (``zlib.crc32``) of the payload and the number of samples the payload holds; then the payload.
- ``cursor``: ``"<sequence> <offset>"``, the first byte not yet acknowledged; replaced atomically (write to a
  temporary file, fsync, rename) on every acknowledgement.

Every append is flushed and fsynced before :meth:`Spool.append` returns, so a batch that was appended survives
``kill -9`` and power loss. An append the disk cannot take (``ENOSPC``, ``EDQUOT``, an I/O error) raises OSError
after cutting its segment back to where it was, so the spool holds exactly what it held before and later appends
stay readable. A cursor that cannot be saved (full disk) is kept in memory, logged once, and saved with a later
acknowledgement: delivery goes on, and a crash meanwhile only sends some acknowledged records again.

A process writes only to segments it created: after a restart, appends go to a new segment, so a record torn by a
crash can only be the tail of an older segment. Reading stops at a torn or corrupt
record (bad magic, CRC mismatch, short read): it is logged with the file and offset, counted in
:attr:`Spool.corrupt_records`, and reading resumes at the next segment; every record before it is still delivered.

The spool is bounded: when its segments exceed ``max_bytes``, the oldest segments are deleted whole, their
unacknowledged samples counted in :attr:`Spool.dropped_samples`. Records are delivered in append order
(at-least-once: a record acknowledged after a crash between send and ack is sent again, and the service's
idempotent ingest stores it once).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"GFS1"
HEADER = struct.Struct(">4sIII")
SEGMENT_SUFFIX = ".seg"
CURSOR_FILE = "cursor"


@dataclass(frozen=True, slots=True)
class Record:
    """One spooled batch: its payload, sample count, and where it ends (``segment``, ``end`` byte offset)."""

    payload: bytes
    samples: int
    segment: int
    end: int


class Spool:
    """Append-only segment files with a persisted read cursor; thread-safe (one writer and one reader).

    Args:
        directory: where segments live; created if missing.
        max_bytes: bound on the segments' total size; the oldest segments are dropped beyond it.
        segment_bytes: a segment is closed once it reaches this size (default: an eighth of ``max_bytes``,
            at most 8 MiB), so that dropping the oldest segment frees a small part of the spool.
    """

    def __init__(self, directory: Path, max_bytes: int = 256 * 2**20, segment_bytes: int | None = None) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes or max(HEADER.size, min(max_bytes // 8, 8 * 2**20))
        self.dropped_samples = 0
        self.corrupt_records = 0
        self._torn: dict[int, int] = {}
        self._cursor_unsaved = False
        self._append_failed = False
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self._cursor = self._read_cursor()
        existing = self._segments()
        self._active = max(existing[-1] + 1 if existing else 1, self._cursor[0] + 1)
        self._active_size = 0
        self._discard_acknowledged(existing)
        self.pending_samples = sum(self._count_samples(seq, self._start_offset(seq)) for seq in self._segments())

    def append(self, payload: bytes, samples: int) -> None:
        """Write one record durably (written and fsynced), then enforce ``max_bytes``.

        Raises OSError (``ENOSPC``, ``EDQUOT``, ``EIO``, ...) when the record cannot be written; the spool then
        holds exactly what it held before (:meth:`_write_frame`)."""
        frame = HEADER.pack(MAGIC, len(payload), zlib.crc32(payload), samples) + payload
        with self._lock:
            if self._active_size and self._active_size + len(frame) > self.segment_bytes:
                self._active += 1
                self._active_size = 0
            self._write_frame(frame)
            self._active_size += len(frame)
            self.pending_samples += samples
            self._enforce_bound()

    def _write_frame(self, frame: bytes) -> None:
        """Append ``frame`` to the active segment and fsync it (and the directory, for a new segment). On OSError the
        segment is truncated back to its size before (a new, empty one deleted); if even that fails, later appends
        go to a new segment, so the torn tail can only end an older segment, where reading skips it. Until an append
        succeeds again, an acknowledgement that reaches the end of the active segment closes it, so that it is
        deleted and frees its room."""
        path = self._path(self._active)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        try:
            view = memoryview(frame)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            if self._active_size == 0:
                _fsync_directory(self.directory)
        except OSError:
            self._append_failed = True
            self._cut_back(fd, path)
            raise
        finally:
            os.close(fd)
        self._append_failed = False

    def _cut_back(self, fd: int, path: Path) -> None:
        """Undo a failed append to the active segment ``path`` (open as ``fd``): see :meth:`_write_frame`."""
        try:
            if self._active_size == 0:
                path.unlink(missing_ok=True)
            else:
                os.ftruncate(fd, self._active_size)
        except OSError as exc:
            log.error("%s: could not cut a failed append back (%s); appending to a new segment", path, exc)
            self._active += 1
            self._active_size = 0

    def peek(self, max_samples: int) -> list[Record]:
        """The oldest unacknowledged records, in order, holding up to ``max_samples`` samples (at least one record)."""
        records: list[Record] = []
        total = 0
        with self._lock:
            for seq in self._segments():
                start = self._start_offset(seq)
                segment_records = self._read(seq, start)
                if not segment_records and self._torn.get(seq) == start:
                    self._skip_torn(seq)
                    continue
                for record in segment_records:
                    if records and total + record.samples > max_samples:
                        return records
                    records.append(record)
                    total += record.samples
        return records

    def ack(self, records: list[Record]) -> None:
        """Mark ``records`` (a prefix returned by :meth:`peek`) delivered: the cursor moves past the last one."""
        if not records:
            return
        last = records[-1]
        with self._lock:
            if (last.segment, last.end) <= self._cursor:
                return  # dropped by the size bound meanwhile
            still_spooled = [r for r in records if (r.segment, r.end) > self._cursor]
            self.pending_samples -= sum(r.samples for r in still_spooled)
            self._cursor = (last.segment, last.end)
            for seq in [seq for seq in self._torn if seq < last.segment]:
                self.pending_samples -= self._count_samples(seq, self._torn.pop(seq))
            if self._append_failed and self._cursor == (self._active, self._active_size):
                self._active += 1  # the disk is full: let the delivered active segment go, to make room
                self._active_size = 0
            self._discard_acknowledged(self._segments())
            self._save_cursor()

    @property
    def size_bytes(self) -> int:
        """Total size of the segment files on disk, bytes."""
        with self._lock:
            return sum(self._path(seq).stat().st_size for seq in self._segments())

    def _enforce_bound(self) -> None:
        segments = self._segments()
        sizes = {seq: self._path(seq).stat().st_size for seq in segments}
        total = sum(sizes.values())
        for seq in segments[:-1]:
            if total <= self.max_bytes:
                break
            lost = self._count_samples(seq, self._start_offset(seq))
            self._path(seq).unlink()
            self._torn.pop(seq, None)
            total -= sizes[seq]
            self.dropped_samples += lost
            self.pending_samples -= lost
            self._cursor = max(self._cursor, (seq + 1, 0))
            self._save_cursor()
            log.warning("spool over %d bytes: dropped segment %d with %d unsent samples", self.max_bytes, seq, lost)

    def _read(self, seq: int, offset: int) -> list[Record]:
        """Records of segment ``seq`` from ``offset``; stops (logged, counted) at a torn or corrupt record."""
        path = self._path(seq)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        records: list[Record] = []
        while offset < len(data):
            problem = None
            if len(data) - offset < HEADER.size:
                problem = "truncated header"
            else:
                magic, length, crc, samples = HEADER.unpack_from(data, offset)
                start, end = offset + HEADER.size, offset + HEADER.size + length
                if magic != MAGIC:
                    problem = "bad magic"
                elif end > len(data):
                    problem = "truncated payload"
                elif zlib.crc32(data[start:end]) != crc:
                    problem = "CRC mismatch"
            if problem is not None:
                if seq != self._active and seq not in self._torn:
                    log.error("%s: %s at byte %d; the rest of this segment is skipped", path, problem, offset)
                    self.corrupt_records += 1
                    self._torn[seq] = offset
                return records
            records.append(Record(data[start:end], samples, seq, end))
            offset = end
        return records

    def _skip_torn(self, seq: int) -> None:
        """Every record before segment ``seq``'s torn point is acknowledged: move on to the next segment."""
        self.pending_samples -= self._count_samples(seq, self._torn.pop(seq))
        self._cursor = (seq + 1, 0)
        self._path(seq).unlink(missing_ok=True)
        self._save_cursor()

    def _count_samples(self, seq: int, offset: int) -> int:
        """Samples in the intact records of segment ``seq`` from ``offset`` (headers only; stops where torn)."""
        total = 0
        try:
            with self._path(seq).open("rb") as handle:
                handle.seek(offset)
                while header := handle.read(HEADER.size):
                    if len(header) < HEADER.size:
                        break
                    magic, length, _, samples = HEADER.unpack(header)
                    if magic != MAGIC:
                        break
                    total += samples
                    handle.seek(length, os.SEEK_CUR)
        except FileNotFoundError:
            return 0
        return total

    def _start_offset(self, seq: int) -> int:
        return self._cursor[1] if seq == self._cursor[0] else 0

    def _discard_acknowledged(self, segments: list[int]) -> None:
        """Delete segments entirely before the cursor, and a fully read segment no longer written."""
        for seq in segments:
            path = self._path(seq)
            consumed = seq < self._cursor[0] or (
                seq == self._cursor[0] and seq != self._active and path.stat().st_size <= self._cursor[1]
            )
            if consumed:
                path.unlink(missing_ok=True)

    def _segments(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob(f"*{SEGMENT_SUFFIX}") if p.stem.isdigit())

    def _path(self, seq: int) -> Path:
        return self.directory / f"{seq:020d}{SEGMENT_SUFFIX}"

    def _read_cursor(self) -> tuple[int, int]:
        path = self.directory / CURSOR_FILE
        try:
            seq, offset = path.read_text().split()
            return int(seq), int(offset)
        except FileNotFoundError:
            return (0, 0)
        except ValueError:
            log.error("%s: unreadable cursor; delivering every spooled segment again", path)
            return (0, 0)

    def _save_cursor(self) -> None:
        """Persist the cursor atomically (temporary file, fsync, rename). When the disk cannot take it, the cursor
        stays in memory (logged once until a save succeeds again): segments already acknowledged whole are deleted
        before saving, and a restart meanwhile resumes from the older saved cursor, sending some records twice."""
        path = self.directory / CURSOR_FILE
        temporary = path.with_suffix(".tmp")
        try:
            with temporary.open("w") as handle:
                handle.write(f"{self._cursor[0]} {self._cursor[1]}\n")
                handle.flush()
                os.fsync(handle.fileno())
            temporary.replace(path)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            if not self._cursor_unsaved:
                log.error("%s: cannot save the spool cursor (%s); kept in memory until the disk takes it", path, exc)
            self._cursor_unsaved = True
            return
        if self._cursor_unsaved:
            log.info("%s: spool cursor saved again", path)
        self._cursor_unsaved = False


def _fsync_directory(directory: Path) -> None:
    """Make a new file's directory entry durable (POSIX: fsync the directory)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
