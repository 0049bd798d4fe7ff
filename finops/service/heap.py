"""The Python heap of a long-running server process, made cheap for the cyclic garbage collector once its
application is built (:func:`settle_heap`).

A ``serve`` process holds some 270,000 objects once started (FastAPI's routes and models, SQLAlchemy's tables and
compiled statements, pydantic's validators), none of them garbage. With CPython's defaults a full collection, which
walks them all, came every few hundred single-cycle ingest POSTs and took about 250 µs per POST averaged out, and
the youngest generation's threshold (700 container objects) was passed by the objects of the requests under way at
once several times per POST: about 100 µs more (measured on a 2-core machine, docs/benchmarks.md, Fleet).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Container objects allocated (less those freed) before the youngest generation is collected: above what the
requests under way at once hold, so that a collection finds garbage rather than live requests' objects (CPython's
default is 700; 3.13 raised its own to 2,000)."""


def settle_heap() -> None:
    """Collect once, move every object then alive out of the collector's reach for good (``gc.freeze``: they are
    never freed, nor walked by a collection), and set the youngest generation's threshold to
    :data:`YOUNG_THRESHOLD`, the older generations' as they were. Call once the application is built, before it
    serves (in each process of ``serve --workers``)."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
