"""Fixtures of the ledger tests: a real TSDB of each kind holding given readings."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from itertools import count
from pathlib import Path

import pytest

from tests.support.prometheus_server import TSDB_KINDS, TsdbLoader, tsdb_holding


@pytest.fixture(params=TSDB_KINDS)
def tsdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TsdbLoader]:
    """``tsdb(lines)``: a VictoriaMetrics, then (the second parametrisation) a Prometheus of the test's own holding
    the readings ``lines`` (Prometheus text exposition, timestamps in milliseconds; :func:`tsdb_holding`); returns
    its base URL. Each call starts a server of its own; they stop when the test ends."""
    started = count()

    def start(lines: Iterable[str]) -> str:
        workdir = tmp_path / f"tsdb-{next(started)}"
        workdir.mkdir()
        return stack.enter_context(tsdb_holding(request.param, workdir, lines))

    with ExitStack() as stack:
        yield start
