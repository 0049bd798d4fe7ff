"""Per-node ingest tokens over a real socket: a token admits its node's batches only (403 and nothing stored for
another node's), revoked, expired and unknown tokens are refused (401), several live tokens of a node all work, the
shared token still admits every node, only a hash is stored, and last use is written at most once a minute."""

from __future__ import annotations

import gzip
import hashlib
from datetime import timedelta

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from finops.db.models import GpuSample, NodeToken
from finops.ingest.node_tokens import authenticate, create_token, revoke_token
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support.servers import API_TOKEN, running, service_metrics

SHARED = "shared-s3cret"


def _clock() -> float:
    """The service's clock for readings' times: 2026-03-02T11:00Z, an hour after the batches' readings."""
    return 1772449200.0


def _batch(node: str) -> dict[str, object]:
    uuid = "GPU-11111111-2222-3333-4444-55555555555" + ("a" if node == "gpu-a-01" else "b")
    return {
        "node": node,
        "gpus": [{"uuid": uuid, "index": 0, "model": "NVIDIA H100 80GB HBM3"}],
        "samples": [{"uuid": uuid, "ts": f"2026-03-02T10:0{i}:00Z", "utilization_ratio": 0.5} for i in range(3)],
    }


def _post(url: str, body: object, token: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{url}/api/v1/ingest", content=gzip.compress(orjson.dumps(body)), headers=headers)


def _count(sessions) -> int:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)))


def _token(sessions, node: str, **kwargs) -> str:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        _row, token = create_token(session, node, kwargs.pop("now", utc_now()), **kwargs, actor="system:test")
    return token


@pytest.fixture
def per_node(sessions):  # type: ignore[no-untyped-def]
    """The service with node tokens only: no shared token, no REST API token."""
    with running(create_app(sessions, None, clock=_clock, api_token=API_TOKEN)) as url:
        yield url


def test_a_node_token_admits_its_own_node_only(per_node: str, sessions) -> None:  # type: ignore[no-untyped-def]
    token_a = _token(sessions, "gpu-a-01")
    stored = _post(per_node, _batch("gpu-a-01"), token_a)
    assert stored.status_code == 200, stored.text
    assert stored.json() == {"accepted": 3, "rejected": []}
    refused = _post(per_node, _batch("gpu-b-01"), token_a)
    assert refused.status_code == 403
    token_id = token_a.split("_")[1]
    assert refused.json() == {"detail": f"node token {token_id} is for node 'gpu-a-01', not 'gpu-b-01'"}
    assert _count(sessions) == 3, "a batch of another node stored something"
    metrics = service_metrics(per_node)
    assert 'gpufinops_ingest_requests_total{code="403"} 1.0' in metrics


def test_revoked_expired_unknown_and_missing_tokens_are_refused(per_node: str, sessions) -> None:  # type: ignore[no-untyped-def]
    revoked = _token(sessions, "gpu-a-01")
    with sessions.begin() as session:
        revoke_token(session, revoked.split("_")[1], utc_now(), actor="system:test")
    expired = _token(sessions, "gpu-a-01", now=utc_now() - timedelta(days=2), expires_in=timedelta(days=1))
    live = _token(sessions, "gpu-a-01")
    wrong_secret = live[:-4] + ("AAAA" if not live.endswith("AAAA") else "BBBB")
    unknown_id = "gft_0123456789abcdef_" + live.split("_", 2)[2]
    for token in (revoked, expired, wrong_secret, unknown_id, "gft_malformed", SHARED, None):
        answer = _post(per_node, _batch("gpu-a-01"), token)
        assert answer.status_code == 401, (token, answer.text)
        assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert _count(sessions) == 0
    # without FINOPS_API_TOKEN nor a shared token the REST API refuses every request rather than being open
    assert httpx.get(f"{per_node}/api/v1/costs").status_code == 401


def test_two_live_tokens_of_a_node_both_work_while_rotating(per_node: str, sessions) -> None:  # type: ignore[no-untyped-def]
    old, new = _token(sessions, "gpu-a-01"), _token(sessions, "gpu-a-01", expires_in=timedelta(days=90))
    assert _post(per_node, _batch("gpu-a-01"), old).status_code == 200
    assert _post(per_node, _batch("gpu-a-01"), new).status_code == 200
    with sessions.begin() as session:
        revoke_token(session, old.split("_")[1], utc_now(), actor="system:test")
    assert _post(per_node, _batch("gpu-a-01"), old).status_code == 401
    assert _post(per_node, _batch("gpu-a-01"), new).status_code == 200


def test_the_shared_token_still_admits_every_node_beside_node_tokens(sessions) -> None:  # type: ignore[no-untyped-def]
    token_a = _token(sessions, "gpu-a-01")
    with running(create_app(sessions, SHARED, clock=_clock, api_token=API_TOKEN)) as url:
        assert _post(url, _batch("gpu-a-01"), SHARED).status_code == 200
        assert _post(url, _batch("gpu-b-01"), SHARED).status_code == 200
        assert _post(url, _batch("gpu-b-01"), token_a).status_code == 403
        assert _post(url, _batch("gpu-a-01"), "wrong").status_code == 401
    assert _count(sessions) == 6


def test_insecure_ingest_admits_anyone_but_still_checks_a_node_token(sessions) -> None:  # type: ignore[no-untyped-def]
    token_a = _token(sessions, "gpu-a-01")
    with running(create_app(sessions, None, clock=_clock, insecure_no_token=True)) as url:
        assert _post(url, _batch("gpu-b-01"), None).status_code == 200
        assert _post(url, _batch("gpu-b-01"), token_a).status_code == 403
        assert _post(url, _batch("gpu-a-01"), token_a[:-1]).status_code == 401


def test_only_a_hash_is_stored(sessions) -> None:  # type: ignore[no-untyped-def]
    token = _token(sessions, "gpu-a-01")
    token_id, secret = token.removeprefix("gft_").split("_", 1)
    assert len(token_id) == 16 and len(secret) >= 43  # 32 random bytes, URL-safe base64
    with sessions() as session:
        row = session.get(NodeToken, token_id)
        assert row is not None
        values = [str(getattr(row, column.key)) for column in NodeToken.__table__.columns]
    assert row.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert not any(secret in value or token in value for value in values)


def test_last_use_is_written_at_most_once_a_minute(sessions) -> None:  # type: ignore[no-untyped-def]
    token = _token(sessions, "gpu-a-01")
    t0 = utc_now().replace(microsecond=0)

    def last_used():  # type: ignore[no-untyped-def]
        with sessions() as session:
            return session.scalar(select(NodeToken.last_used_at))

    holder = authenticate(sessions, token, t0)
    assert holder is not None and holder.node == "gpu-a-01"
    assert last_used() == t0
    authenticate(sessions, token, t0 + timedelta(seconds=59))
    assert last_used() == t0
    authenticate(sessions, token, t0 + timedelta(seconds=60))
    assert last_used() == t0 + timedelta(seconds=60)
