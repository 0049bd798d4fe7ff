"""``gpu-finops nodes token create|list|revoke``: the token is printed once, last, and works against the service over
a socket; list never shows it; revoke refuses it; ``serve`` starts on node tokens alone, refuses to start with no
token at all, and warns once that a shared token admits every node."""

from __future__ import annotations

import gzip
import logging
from datetime import UTC, datetime

import httpx
import orjson
from sqlalchemy import select

from finops.cli import app
from finops.db.models import NodeToken
from finops.web.app import create_app
from tests.support.servers import running

READ_AT = "2026-03-02T10:00:00Z"


def _clock() -> float:
    """The service's clock for readings' times: an hour after :data:`READ_AT`."""
    return datetime(2026, 3, 2, 11, tzinfo=UTC).timestamp()


def _post(url: str, node: str, token: str) -> int:
    uuid = "GPU-11111111-2222-3333-4444-555555555555"
    body = {
        "node": node,
        "gpus": [{"uuid": uuid, "index": 0, "model": "NVIDIA H100 80GB HBM3"}],
        "samples": [{"uuid": uuid, "ts": READ_AT, "utilization_ratio": 0.5}],
    }
    headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "gzip", "Content-Type": "application/json"}
    return httpx.post(f"{url}/api/v1/ingest", content=gzip.compress(orjson.dumps(body)), headers=headers).status_code


def test_create_prints_the_token_last_and_list_never_shows_it(cli_env, sessions) -> None:  # type: ignore[no-untyped-def]
    created = cli_env.invoke(app, ["nodes", "token", "create", "gpu-a-01", "--expires", "90d"])
    assert created.exit_code == 0, created.output
    lines = created.stdout.splitlines()
    token = lines[-1]
    assert token.startswith("gft_") and " " not in token
    token_id = token.split("_")[1]
    assert lines[0].split() == ["id", token_id] and lines[1].split() == ["node", "gpu-a-01"]
    assert lines[2].startswith("expires  2")
    assert "has sent no batch yet" in created.stderr  # a new node: allowed, and said
    second = cli_env.invoke(app, ["nodes", "token", "create", "gpu-a-01"])
    assert second.exit_code == 0 and "expires  never" in second.stdout
    second_token = second.stdout.splitlines()[-1]

    with running(create_app(sessions, None, clock=_clock)) as url:
        assert _post(url, "gpu-a-01", token) == 200
        assert _post(url, "gpu-a-01", second_token) == 200
        assert _post(url, "gpu-b-01", token) == 403
        assert "has sent no batch yet" not in cli_env.invoke(app, ["nodes", "token", "create", "gpu-a-01"]).stderr

        listed = cli_env.invoke(app, ["nodes", "token", "list", "--node", "gpu-a-01"])
        assert listed.exit_code == 0, listed.output
        secret = token.split("_", 2)[2]
        assert secret not in listed.output and token not in listed.output
        rows = {line.split()[0]: line.split() for line in listed.output.splitlines()[1:]}
        assert len(rows) == 3
        assert rows[token_id][1:3] == ["gpu-a-01", "live"] and rows[token_id][-1] == "-"
        assert rows[token_id][5] != "-", "last use not shown"

        revoked = cli_env.invoke(app, ["nodes", "token", "revoke", token_id])
        assert revoked.exit_code == 0 and f"revoked node token {token_id} of node gpu-a-01" in revoked.output
        assert _post(url, "gpu-a-01", token) == 401
        assert _post(url, "gpu-a-01", second_token) == 200
    again = cli_env.invoke(app, ["nodes", "token", "revoke", token_id])
    assert again.exit_code == 0 and "already revoked at" in again.output
    listed = cli_env.invoke(app, ["nodes", "token", "list"])
    assert next(line for line in listed.output.splitlines() if line.startswith(token_id)).split()[2] == "revoked"
    with sessions() as session:
        assert all(secret not in row.secret_sha256 for row in session.scalars(select(NodeToken)))


def test_bad_input_is_a_user_error(cli_env) -> None:  # type: ignore[no-untyped-def]
    unknown = cli_env.invoke(app, ["nodes", "token", "revoke", "0123456789abcdef"])
    assert unknown.exit_code == 2 and "no token '0123456789abcdef'" in unknown.stderr
    bad = cli_env.invoke(app, ["nodes", "token", "create", "gpu-a-01", "--expires", "3 months"])
    assert bad.exit_code == 2 and "units w, d, h, m, s" in bad.stderr


def test_serve_starts_on_node_tokens_alone_and_warns_about_a_shared_token(  # type: ignore[no-untyped-def]
    cli_env, started, caplog, monkeypatch
) -> None:
    refused = cli_env.invoke(app, ["serve", "--no-scheduler"])
    assert refused.exit_code == 2 and "gpu-finops nodes token create NODE" in refused.stderr
    assert cli_env.invoke(app, ["nodes", "token", "create", "gpu-a-01"]).exit_code == 0
    with caplog.at_level(logging.WARNING, logger="finops.cli.serve"):
        assert cli_env.invoke(app, ["serve", "--no-scheduler"]).exit_code == 0
        assert len(started) == 1
        assert not any("admits batches of every node" in r.message for r in caplog.records)
        monkeypatch.setenv("FINOPS_INGEST_TOKEN", "shared-s3cret-value")
        assert cli_env.invoke(app, ["serve", "--no-scheduler"]).exit_code == 0
    shared = [r for r in caplog.records if "admits batches of every node" in r.message]
    assert len(shared) == 1 and shared[0].levelno == logging.WARNING
    assert "gpu-finops nodes token create NODE" in shared[0].message
    assert not any("shared-s3cret-value" in r.getMessage() for r in caplog.records)
