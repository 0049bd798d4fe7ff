"""``gpu-finops api-token create|list|revoke``: the token is printed once, last, and works against the service over a
socket with its role (a team token reads its team's costs only and may not write); list shows its role, team and
state, never the secret; revoke refuses it; bad options are one ``error:`` line; only the secret's hash is stored.
``serve`` refuses to start when ``FINOPS_API_TOKEN`` equals ``FINOPS_INGEST_TOKEN``, and warns when no API credential
exists."""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta

import httpx
from fastapi import FastAPI
from sqlalchemy import func, inspect, select

from finops.cli import app
from finops.db.models import ApiToken, Budget
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support.servers import API_TOKEN, running


def _costs(url: str, token: str, start: datetime) -> httpx.Response:
    """``GET /api/v1/costs`` by team from ``start`` to a day from now, with ``token``."""
    period = {"start": start.isoformat(), "end": (utc_now() + timedelta(days=1)).isoformat(), "group_by": "team"}
    return httpx.get(f"{url}/api/v1/costs", params=period, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _listed(cli_env, token_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The columns of ``api-token list``'s row of ``token_id``: id, role, team, name, state, created, expires, last
    used, revoked."""
    listed = cli_env.invoke(app, ["api-token", "list"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines()[0].split()[:5] == ["id", "role", "team", "name", "state"]
    return next(line.split() for line in listed.output.splitlines() if line.startswith(token_id))


def test_a_team_token_reads_its_team_until_revoked_and_only_its_hash_is_stored(  # type: ignore[no-untyped-def]
    loaded, cli_env
) -> None:
    sessions, t0, _rate, _pricing = loaded
    before = utc_now().replace(microsecond=0)
    created = cli_env.invoke(
        app, ["api-token", "create", "--role", "team", "--team", "alpha", "--name", "alpha-ci", "--expires", "1d"]
    )
    after = utc_now()
    assert created.exit_code == 0, created.output
    lines = created.stdout.splitlines()
    token = lines[-1]
    assert token.startswith("gfa_") and " " not in token
    assert created.stdout.count(token) == 1 and token not in created.stderr
    assert "no team" not in created.stderr, "alpha has jobs"
    misspelt = cli_env.invoke(app, ["api-token", "create", "--role", "team", "--team", "alpah"])
    assert misspelt.exit_code == 0 and "note: no team 'alpah' yet" in misspelt.stderr
    token_id, secret = token.removeprefix("gfa_").split("_", 1)
    fields = dict(line.split(None, 1) for line in lines[:-1])
    assert fields.keys() == {"id", "role", "team", "name", "expires"}
    assert (fields["id"], fields["role"], fields["team"], fields["name"]) == (token_id, "team", "alpha", "alpha-ci")
    expires = datetime.fromisoformat(fields["expires"])
    assert before + timedelta(days=1) <= expires <= after + timedelta(days=1)

    with running(create_app(sessions, None, api_token=API_TOKEN)) as url:
        everyone = _costs(url, API_TOKEN, t0 - timedelta(days=1))
        assert everyone.status_code == 200, everyone.text
        assert {"alpha", "__unmapped__"} <= {row["team"] for row in everyone.json()["rows"]}
        alpha = _costs(url, token, t0 - timedelta(days=1))
        assert alpha.status_code == 200, alpha.text
        assert [row["team"] for row in alpha.json()["rows"]] == ["alpha"]
        budget = httpx.put(
            f"{url}/api/v1/budgets/alpha/{t0:%Y-%m}",
            json={"amount": "100", "currency": "USD"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert budget.status_code == 403 and "needs an admin token" in budget.json()["detail"], budget.text
        with sessions() as session:
            assert session.scalar(select(func.count()).select_from(Budget)) == 0

        listed = cli_env.invoke(app, ["api-token", "list"])
        assert secret not in listed.output and token not in listed.output
        row = _listed(cli_env, token_id)
        assert row[1:5] == ["team", "alpha", "alpha-ci", "live"]
        assert row[6] == fields["expires"] and row[7] != "-" and row[8] == "-", row  # used, not revoked

        revoked = cli_env.invoke(app, ["api-token", "revoke", token_id])
        assert revoked.exit_code == 0 and f"revoked API token {token_id} (team)" in revoked.output, revoked.output
        refused = _costs(url, token, t0 - timedelta(days=1))
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer", refused.text
    row = _listed(cli_env, token_id)
    assert row[4] == "revoked" and row[8] != "-", row

    with sessions() as session:
        stored = session.get(ApiToken, token_id)
        assert stored is not None
        assert stored.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
        values = [str(getattr(stored, column.key)) for column in inspect(ApiToken).columns]
    assert not [value for value in values if secret in value or token in value]


def test_bad_options_are_one_error_line_and_make_no_token(cli_env, sessions) -> None:  # type: ignore[no-untyped-def]
    for options, says in (
        (["--role", "team"], "--team"),
        (["--role", "viewer", "--team", "alpha"], "team role only"),
        (["--role", "root"], "one of viewer, team, admin"),
        (["--role", "viewer", "--expires", "3 months"], "units w, d, h, m, s"),
        (["--role", "viewer", "--expires", "0s"], "must live more than 0 s"),
    ):
        result = cli_env.invoke(app, ["api-token", "create", *options])
        assert result.exit_code == 2, (options, result.output)
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: "), (options, result.stderr)
        assert says in result.stderr and result.stdout == "", (options, result.output)
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(ApiToken)) == 0


def test_serve_refuses_an_api_token_equal_to_the_ingest_token(  # type: ignore[no-untyped-def]
    cli_env, started, caplog, monkeypatch
) -> None:
    monkeypatch.setenv("FINOPS_INGEST_TOKEN", "ingest-s3cret-value")
    with caplog.at_level(logging.WARNING, logger="finops.cli.serve"):
        assert cli_env.invoke(app, ["serve", "--no-scheduler"]).exit_code == 0
    assert any("no API token" in r.message and "gpu-finops api-token create" in r.message for r in caplog.records)

    monkeypatch.setenv("FINOPS_API_TOKEN", "ingest-s3cret-value")
    refused = cli_env.invoke(app, ["serve", "--no-scheduler"])
    assert refused.exit_code == 2, refused.output
    assert len(refused.stderr.splitlines()) == 1 and refused.stderr.startswith("error: "), refused.stderr
    assert "FINOPS_API_TOKEN equals FINOPS_INGEST_TOKEN" in refused.stderr
    assert "ingest-s3cret-value" not in refused.output
    assert len(started) == 1, "serve started although refused"

    caplog.clear()
    monkeypatch.setenv("FINOPS_API_TOKEN", "api-s3cret-value")
    with caplog.at_level(logging.WARNING, logger="finops.cli.serve"):
        assert cli_env.invoke(app, ["serve", "--no-scheduler"]).exit_code == 0
    assert not any("no API token" in r.message for r in caplog.records)
    served = started[-1]["app"]
    assert isinstance(served, FastAPI)
    with running(served) as url:
        for token, status in (("ingest-s3cret-value", 401), ("api-s3cret-value", 200)):
            answer = httpx.get(f"{url}/api/v1/team-rules", headers={"Authorization": f"Bearer {token}"}, timeout=30)
            assert answer.status_code == status, (token, answer.text)
