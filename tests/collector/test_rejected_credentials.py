"""Refused credentials against the real service on a socket: a revoked token (401) or another node's (403) keeps
the readings spooled, says so loudly at a bounded rate, and a token file replaced with a live token delivers
everything, without a restart."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from collector.contract import wire
from collector.contract.sample import Sample
from collector.delivery import CREDENTIALS_LOG_SECONDS, Delivery
from collector.exposition import DeliveryStats
from collector.shipper import Backoff, Shipper
from collector.spool import Spool
from finops.db.models import GpuSample
from finops.ingest.node_tokens import create_token, revoke_token
from finops.web.app import create_app
from tests.support.servers import running

NODE = "gpu-cred-01"
GPUS = 8
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def _cycle(index: int) -> list[Sample]:
    return [
        Sample(
            "gpu",
            {"gpu": str(i), "uuid": f"GPU-cred-{i}", "model": "H100", "mig_profile": "", "parent_uuid": ""},
            {"gpufinops_gpu_utilization_ratio": 0.5, "gpufinops_gpu_up": 1.0},
            T0 + timedelta(seconds=10 * index),
        )
        for i in range(GPUS)
    ]


def _token(sessions: sessionmaker[Session], node: str) -> tuple[str, str]:
    """A live node token for ``node``: (its id, its text)."""
    with sessions.begin() as session:
        row, token = create_token(session, node, datetime.now(UTC), actor="system:test")
        return row.id, token


def _replace(path: Path, token: str) -> None:
    """Swap the token file's content the way configuration management does: write beside it, rename over it."""
    temporary = path.with_suffix(".new")
    temporary.write_text(token + "\n")
    temporary.replace(path)


def _stored(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)) or 0)


def _rejected_gauge(delivery: Delivery) -> float | None:
    registry = CollectorRegistry()
    registry.register(DeliveryStats(delivery))
    return registry.get_sample_value("gpufinops_collector_credentials_rejected")


class Clock:
    """Monotonic seconds the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_refused_credentials_keep_the_readings_until_a_live_token_is_in_the_file(
    sessions: sessionmaker[Session], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    first_id, first = _token(sessions, NODE)
    token_file.write_text(first + "\n")
    clock = Clock()
    caplog.set_level(logging.INFO, logger="collector")
    with running(create_app(sessions, None)) as url:
        shipper = Shipper(url, first, NODE, token_file=token_file)
        delivery = Delivery(Spool(tmp_path / "spool"), shipper, backoff=Backoff(0.01, 0.05), clock=clock)
        for i in range(3):
            delivery.enqueue(_cycle(i))
        assert delivery.send_next() == 0.0 and _stored(sessions) == 3 * GPUS
        assert _rejected_gauge(delivery) == 0.0

        with sessions.begin() as session:
            revoke_token(session, first_id, datetime.now(UTC), actor="system:test")
        for i in range(3, 6):
            delivery.enqueue(_cycle(i))
        for _ in range(3):
            delay = delivery.send_next()
            assert delay is not None and delay > 0, "refused credentials are retried, not dropped"
        assert delivery.spool.pending_samples == 3 * GPUS and delivery.rejected_samples == 0
        assert _rejected_gauge(delivery) == 1.0
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, "repeated at a bounded rate, not on every try"
        assert "HTTP 401" in errors[0] and str(token_file) in errors[0] and NODE in errors[0]

        _replace(token_file, _token(sessions, "gpu-other-01")[1])  # a token of another node: 403
        clock.now += CREDENTIALS_LOG_SECONDS
        assert (delivery.send_next() or 0) > 0
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 2 and "HTTP 403" in errors[1], "said again once the interval has passed"
        assert delivery.spool.pending_samples == 3 * GPUS and _stored(sessions) == 3 * GPUS

        _replace(token_file, _token(sessions, NODE)[1])  # the operator puts a live token in the file
        while (delay := delivery.send_next()) is not None:
            assert delay == 0.0
    assert _stored(sessions) == 6 * GPUS, "nothing lost"
    assert delivery.shipped_samples == 6 * GPUS and delivery.spool.pending_samples == 0
    assert _rejected_gauge(delivery) == 0.0
    assert any("takes the credentials" in r.getMessage() for r in caplog.records)


def test_an_unreadable_token_file_keeps_the_last_token(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sent: list[str] = []

    def service(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers["Authorization"])
        return httpx.Response(200, json={"accepted": GPUS, "rejected": []})

    token_file = tmp_path / "token"
    token_file.write_text("gft_first.secret\n")
    client = httpx.Client(transport=httpx.MockTransport(service))
    shipper = Shipper("http://finops.test", "gft_first.secret", NODE, client=client, token_file=token_file)
    batch = wire.batch_dict(_cycle(0))
    token_file.rename(tmp_path / "moved")
    shipper.send(batch)
    shipper.send(batch)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(token_file) in errors[0] and "No such file" in errors[0]
    token_file.write_text("  gft_second.secret \n")
    shipper.send(batch)
    assert sent == ["Bearer gft_first.secret", "Bearer gft_first.secret", "Bearer gft_second.secret"]
