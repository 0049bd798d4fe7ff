"""FastAPI's 422 over a real socket: a request refused in validation is told each field's place, the error's type and
why, never the value it sent: a 1 MiB string where 128 characters are allowed comes back as a few hundred bytes."""

from __future__ import annotations

import json

import httpx

from finops.web.app import MAX_ERROR_TEXT, create_app, validation_errors
from tests.support.servers import API_TOKEN, running

API = {"Authorization": f"Bearer {API_TOKEN}", "Content-Type": "application/json"}
MIB = 2**20


def test_a_1_mib_invalid_field_is_named_not_echoed(sessions) -> None:  # type: ignore[no-untyped-def]
    app = create_app(sessions, "validation-token", api_token=API_TOKEN)
    huge = "x" * MIB
    with running(app) as url:
        response = httpx.put(
            f"{url}/api/v1/team-rules",
            content=json.dumps({"kind": "account", "value": "acct-a", "team": huge}),
            headers=API,
            timeout=60,
        )
        missing = httpx.put(f"{url}/api/v1/team-rules", content=json.dumps({"team": huge}), headers=API, timeout=60)
    assert response.status_code == 422, response.text[:300]
    assert len(response.content) < 1024
    assert response.json() == {
        "detail": [
            {"type": "string_too_long", "loc": ["body", "team"], "msg": "String should have at most 128 characters"}
        ]
    }
    assert missing.status_code == 422
    assert len(missing.content) < 1024, "the body a missing field is reported against is not echoed either"
    assert {(tuple(e["loc"]), e["type"]) for e in missing.json()["detail"]} >= {(("body", "kind"), "missing")}
    assert all(set(error) == {"type", "loc", "msg"} for error in missing.json()["detail"])


def test_a_message_or_place_quoting_a_long_value_is_cut_saying_so() -> None:
    long = "k" * (MAX_ERROR_TEXT + 10)
    errors = [{"type": "value_error", "loc": ("body", "labels", long, 3), "msg": f"bad {long}", "input": long}]
    (error,) = validation_errors(errors)
    assert error == {
        "type": "value_error",
        "loc": ["body", "labels", f"{long[:MAX_ERROR_TEXT]}… (10 characters more)", 3],
        "msg": f"bad {long}"[:MAX_ERROR_TEXT] + "… (14 characters more)",
    }
