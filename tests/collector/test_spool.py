"""The durable spool: order, acknowledgement across restarts, size bound, torn and corrupt records, kill -9."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from collector.spool import HEADER, Spool


def _payloads(spool: Spool, limit: int = 10**9) -> list[bytes]:
    return [record.payload for record in spool.peek(limit)]


def _fill(spool: Spool, count: int, samples: int = 8) -> None:
    for i in range(count):
        spool.append(f"batch-{i}".encode(), samples)


def test_records_come_back_in_order_and_leave_only_when_acknowledged(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    _fill(spool, 5)
    assert spool.pending_samples == 40
    first = spool.peek(16)
    assert [r.payload for r in first] == [b"batch-0", b"batch-1"]
    assert _payloads(spool) == [f"batch-{i}".encode() for i in range(5)], "peek does not consume"
    spool.ack(first)
    assert spool.pending_samples == 24
    assert _payloads(spool) == [b"batch-2", b"batch-3", b"batch-4"]


def test_a_restart_redelivers_what_was_not_acknowledged_and_nothing_else(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    _fill(spool, 4)
    spool.ack(spool.peek(8))
    reopened = Spool(tmp_path)
    assert reopened.pending_samples == 24
    assert _payloads(reopened) == [b"batch-1", b"batch-2", b"batch-3"]
    reopened.append(b"after-restart", 8)
    reopened.ack(reopened.peek(10**9))
    assert reopened.pending_samples == 0
    assert _payloads(Spool(tmp_path)) == []
    assert list(tmp_path.glob("*.seg")) == [], "fully acknowledged segments are deleted"


def test_appends_after_restarts_that_found_everything_delivered_are_delivered(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    _fill(spool, 2)
    spool.ack(spool.peek(10**9))
    Spool(tmp_path)  # a restart deletes the delivered segment; the cursor stays at its end
    again = Spool(tmp_path)
    again.append(b"after-two-restarts", 8)
    assert _payloads(Spool(tmp_path)) == [b"after-two-restarts"]


def test_the_size_bound_drops_the_oldest_segments_and_counts_their_samples(tmp_path: Path) -> None:
    record_bytes = HEADER.size + len(b"batch-0")
    spool = Spool(tmp_path, max_bytes=10 * record_bytes, segment_bytes=2 * record_bytes)
    _fill(spool, 30)
    payloads = _payloads(spool)
    assert payloads[-1] == b"batch-29"
    assert len(payloads) <= 10
    assert spool.dropped_samples == (30 - len(payloads)) * 8
    assert spool.pending_samples == len(payloads) * 8
    assert payloads == [f"batch-{i}".encode() for i in range(30 - len(payloads), 30)], "newest kept, in order"


def test_a_truncated_tail_is_skipped_and_earlier_records_are_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _fill(Spool(tmp_path), 3)
    (segment,) = tmp_path.glob("*.seg")
    segment.write_bytes(segment.read_bytes()[:-3])  # the last append torn mid-payload
    spool = Spool(tmp_path)
    spool.append(b"next", 8)
    with caplog.at_level(logging.ERROR):
        records = spool.peek(10**9)
    assert [r.payload for r in records] == [b"batch-0", b"batch-1", b"next"]
    assert spool.corrupt_records == 1
    assert f"{segment}: truncated payload at byte {2 * (HEADER.size + 7)}" in caplog.text
    spool.ack(records)
    assert spool.pending_samples == 0
    assert _payloads(spool) == []


def test_a_corrupt_record_skips_the_rest_of_its_segment_only(tmp_path: Path) -> None:
    record_bytes = HEADER.size + len(b"batch-0")
    _fill(Spool(tmp_path, segment_bytes=3 * record_bytes), 6)
    first, _ = sorted(tmp_path.glob("*.seg"))
    data = bytearray(first.read_bytes())
    data[record_bytes + HEADER.size] ^= 0xFF  # flip a payload byte of the second record: CRC mismatch
    first.write_bytes(bytes(data))
    spool = Spool(tmp_path)
    assert _payloads(spool) == [b"batch-0", b"batch-3", b"batch-4", b"batch-5"]
    assert spool.corrupt_records == 1
    spool.ack(spool.peek(1))
    assert _payloads(spool) == [b"batch-3", b"batch-4", b"batch-5"]


def test_every_append_that_returned_survives_kill_9(tmp_path: Path) -> None:
    writer = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from collector.spool import Spool
        spool = Spool(Path({str(tmp_path)!r}))
        for i in range(10**9):
            spool.append(b"x" * 4000 + str(i).encode(), 8)
            print(i, flush=True)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    last = -1
    deadline = time.monotonic() + 30
    while last < 200 and time.monotonic() < deadline:
        last = int(process.stdout.readline())
    process.send_signal(signal.SIGKILL)
    process.wait()
    payloads = _payloads(Spool(tmp_path))
    indices = [int(p[4000:]) for p in payloads]
    assert indices[: last + 1] == list(range(last + 1)), "every acknowledged append is there, in order"
    assert len(indices) <= last + 2, "at most the append in flight besides"
