"""Readings refused for their time, counted per node and reason (``untimely_readings``): what the data quality page
shows of a node whose clock is off (:func:`finops.analysis.quality.untimely_by_node` reads it).

Ingest refuses a reading stamped outside :class:`finops.ingest.limits.TimeWindow` one by one; :func:`record_untimely`
adds a batch's refusals to its node's counts, in a transaction of its own, so that a clock an hour fast, whose
readings are all refused (nothing of the node is stored), is still seen.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import UntimelyReadings

log = logging.getLogger(__name__)

ERROR_MAX_LENGTH = 512
"""Longest ``last_error`` kept (the width of the column)."""


def record_untimely(
    sessions: sessionmaker[Session], node: str, counts: Mapping[str, int], error: str, now: datetime
) -> None:
    """Add ``counts`` (reason → readings refused) to ``node``'s rows of ``untimely_readings`` at ``now``, with
    ``error`` as the newest refusal's text, and log it (WARNING). A database that cannot take it is logged, not
    raised: the refusals are in the batch's answer and the collector's ``/metrics`` all the same."""
    log.warning("node %s: %s readings refused for their time; e.g. %s", node, dict(counts), error)
    rows = [
        {"node": node, "reason": reason, "readings": readings, "first_at": now, "last_at": now,
         "last_error": error[:ERROR_MAX_LENGTH]}
        for reason, readings in counts.items() if readings
    ]  # fmt: skip
    if not rows:
        return
    try:
        with sessions.begin() as session:
            insert = sqlite.insert if session.get_bind().dialect.name == "sqlite" else postgresql.insert
            statement = insert(UntimelyReadings).values(rows)
            statement = statement.on_conflict_do_update(
                index_elements=[UntimelyReadings.node, UntimelyReadings.reason],
                set_={
                    "readings": UntimelyReadings.readings + statement.excluded.readings,
                    "last_at": statement.excluded.last_at,
                    "last_error": statement.excluded.last_error,
                },
            )
            session.execute(statement)
    except OperationalError as exc:
        log.warning("node %s: untimely readings not counted (%s)", node, exc.orig)
