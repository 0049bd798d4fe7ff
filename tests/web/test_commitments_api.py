"""``GET /api/v1/commitments`` over a real socket, on both databases: fleet-wide, so a viewer or admin token reads it
and a team token is refused (403), no token 401; its inputs bounded (422 naming the parameter, never a 500). The
data: the scenario slice rolled up (tests/support/scenario.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from finops.access.api_tokens import create_token
from finops.timeutil import utc_now
from finops.web.app import create_app
from tests.support.servers import running

SETTING = "commitments-setting"


@pytest.fixture
def served(loaded) -> Iterator[tuple[str, dict[str, str]]]:  # type: ignore[no-untyped-def]
    """The service's base URL and a token per role (``viewer``, ``admin``, ``team`` of alpha)."""
    sessions = loaded[0]
    tokens = {}
    with sessions.begin() as session:
        for role, team in (("viewer", None), ("admin", None), ("team", "alpha")):
            tokens[role] = create_token(session, role, utc_now(), team=team, actor="system:test")[1]
    with running(create_app(sessions, "ingest-only", api_token=SETTING)) as url:
        yield url, tokens


def _get(url: str, token: str | None, **params: object) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return httpx.get(f"{url}/api/v1/commitments", params=params, headers=headers)


def test_viewers_and_admins_read_it_and_a_team_token_is_refused(served) -> None:  # type: ignore[no-untyped-def]
    url, tokens = served
    for role in ("viewer", "admin"):
        response = _get(url, tokens[role], days=1)
        assert response.status_code == 200, (role, response.text)
        (plan,) = response.json()["commitments"]
        assert (plan["model"], plan["gpu_hours"]) == ("H100-SXM-80GB", 3.0), "the slice's 3 held GPU-hours"
    refused = _get(url, tokens["team"], days=1)
    assert refused.status_code == 403 and "a team token of team 'alpha'" in refused.json()["detail"]
    assert _get(url, None).status_code == 401


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"days": 0}, "days"),
        ({"days": 367}, "days"),
        ({"days": "a week"}, "days"),
        ({"quantity": -1}, "quantity"),
        ({"quantity": 1_000_001}, "quantity"),
        ({"quantity": 1.5}, "quantity"),
        ({"model": "m" * 129}, "model"),
    ],
)
def test_inputs_out_of_bounds_answer_422(served, params: dict[str, object], name: str) -> None:  # type: ignore[no-untyped-def]
    url, tokens = served
    response = _get(url, tokens["viewer"], **params)
    assert response.status_code == 422, response.text
    assert [error["loc"] for error in response.json()["detail"]] == [["query", name]]
    what_if = _get(url, tokens["viewer"], days=366, quantity=1_000_000, model="m" * 128)
    assert what_if.status_code == 200 and what_if.json()["quantity"] == 1_000_000, "the bounds themselves are taken"
