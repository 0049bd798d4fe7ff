"""Ingest bodies sent gzipped (``Content-Encoding: gzip``, RFC 1952), inflated within :data:`MAX_BODY_BYTES`."""

from __future__ import annotations

import gzip
import io
import zlib

from finops.web.body_limits import too_large

MAX_BODY_BYTES = 16 * 2**20
"""Largest ingest body, as sent and once decompressed (a collector posts at most 10,000 readings at a time,
:class:`collector.delivery.Delivery`: about 1.5 MB of JSON); a larger one is answered 413 without being read or
decompressed further. Bodies are read only within one of the
:data:`finops.web.app.INGEST_CONCURRENCY` slots, so at most that many
are held at once."""


def decompress(body: bytes) -> bytes | tuple[int, dict[str, str]]:
    """A gzip request body inflated (:func:`_gunzip`), or the answer refusing it (HTTP status, JSON body): 400 (not
    gzip), 413 (over :data:`MAX_BODY_BYTES` once inflated)."""
    try:
        return _gunzip(body)
    except (OSError, EOFError, zlib.error) as exc:
        return 400, {"detail": f"body is not valid gzip: {exc}"}
    except _TooLarge:
        return 413, too_large(MAX_BODY_BYTES, " once decompressed")


GZIP_WBITS = 16 + zlib.MAX_WBITS
"""``zlib`` window bits of a gzip stream (RFC 1952 header and trailer, the largest window)."""


class _TooLarge(Exception):
    """A body over :data:`MAX_BODY_BYTES` once decompressed."""


def _gunzip(body: bytes) -> bytes:
    """``body`` gunzipped (one or more gzip members, RFC 1952; trailing zero padding allowed, as by
    :func:`gzip.decompress`), in time linear in its size; raises :class:`_TooLarge` once the output passes
    :data:`MAX_BODY_BYTES` (nothing more is inflated), and ``OSError``/``EOFError`` for a corrupt or truncated
    stream. A body of one whole member, what collectors send, is inflated by one ``zlib`` call (a few µs, where
    ``gzip.GzipFile`` takes tens); any other goes through ``GzipFile``, which also words the errors."""
    single = zlib.decompressobj(GZIP_WBITS)
    try:
        out = single.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error:
        out = b""
    if len(out) > MAX_BODY_BYTES:
        raise _TooLarge
    if single.eof and not single.unused_data:
        return out
    with gzip.GzipFile(fileobj=io.BytesIO(body)) as stream:
        out = stream.read(MAX_BODY_BYTES + 1)
    if len(out) > MAX_BODY_BYTES:
        raise _TooLarge
    return out
