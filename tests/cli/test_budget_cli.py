"""``gpu-finops budget set|delete|status`` on both databases: refusals as one ``error: …`` line and exit code 2 with
the REST API's messages, an unknown team confirmed on a terminal (or ``--yes``), and the status table."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal

import httpx
from typer.testing import CliRunner, Result

from finops.cli import app
from finops.db.models import Budget
from finops.jobs.teams import team_by_name
from finops.timeutil import month_start
from finops.web.app import create_app
from tests.support.servers import running

TOKEN = "budget-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _url(sessions) -> str:  # type: ignore[no-untyped-def]
    return str(sessions.kw["bind"].url.render_as_string(hide_password=False))


def _budget(sessions, *args: str) -> Result:  # type: ignore[no-untyped-def]
    return CliRunner().invoke(app, ["budget", *args], env={"FINOPS_DATABASE_URL": _url(sessions)})


def test_set_status_delete(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    month = f"{t0:%Y-%m}"
    result = _budget(sessions, "set", "alpha", "1000", "--month", month)
    assert (result.exit_code, result.stdout) == (0, f"budget of team alpha for {month}: 1,000.00 USD\n")
    result = _budget(sessions, "set", "alpha", "25", "--month", month, "--project", "llm", "--currency", "USD")
    assert result.stdout == f"budget of team alpha project llm for {month}: 25.00 USD\n"
    if month_start(t0) == month_start(t0 + timedelta(hours=3)):  # the status command reads this month
        table = _budget(sessions, "status").stdout.splitlines()
        assert table[0].split() == ["team", "budget", "spent", "MTD", "used", "%", "forecast", "currency"]
        assert [line.split()[0] for line in table[1:]] == ["alpha", "alpha/llm"]
        assert table[1].split()[1] == "1,000.00" and table[1].split()[-1] == "USD"
    result = _budget(sessions, "delete", "alpha", month, "--project", "llm")
    assert (result.exit_code, result.stdout) == (0, f"deleted the budget of team alpha project llm for {month}\n")
    result = _budget(sessions, "delete", "alpha", month, "--project", "llm")
    assert (result.exit_code, result.stderr) == (2, f"error: no budget for team alpha project llm in {month}\n")
    assert _budget(sessions, "delete", "alpha", month).exit_code == 0
    with sessions() as session:
        assert session.query(Budget).count() == 0


def test_refusals_are_the_rest_apis(loaded) -> None:  # type: ignore[no-untyped-def]
    """Each refused request: exit code 2 and one line ``error: <message>`` on the command line, 422 with the same
    message at the field's place in the REST API; nothing stored by either."""
    sessions, t0, _, _ = loaded
    month = f"{t0:%Y-%m}"
    cases = [
        (["alpha", "abc"], ("alpha", month, {"amount": "abc"}, {}), ["body", "amount"], None),
        (["alpha", "0"], ("alpha", month, {"amount": "0"}, {}), ["body", "amount"], "amount 0 is not more than 0"),
        (
            ["alpha", "1e12"],
            ("alpha", month, {"amount": "1e12"}, {}),
            ["body", "amount"],
            "amount 1E+12 is not below 1,000,000,000,000",
        ),
        (["alpha", "NaN"], ("alpha", month, {"amount": "NaN"}, {}), ["body", "amount"], None),
        (
            ["alpha", "100", "--currency", "EUR"],
            ("alpha", month, {"amount": "100", "currency": "EUR"}, {}),
            ["body", "currency"],
            "budget currency EUR is not the price catalogue's currency USD: spend is priced in USD and budgets are "
            "not converted; give the amount in USD",
        ),
        (
            ["alpha", "100", "--month", "2026-13"],
            ("alpha", "2026-13", {"amount": "100"}, {}),
            ["path", "month"],
            "month '2026-13' is not a month as YYYY-MM",
        ),
        (
            ["alpha", "100", "--project", "p" * 200],
            ("alpha", month, {"amount": "100"}, {"project": "p" * 200}),
            ["query", "project"],
            None,
        ),
        (
            ["nosuchteam", "100"],
            ("nosuchteam", month, {"amount": "100"}, {}),
            ["path", "team"],
            "team nosuchteam has no jobs or rules yet; known teams: __unallocated__, __unmapped__, alpha",
        ),
    ]
    with running(create_app(sessions, "ingest-only", api_token=TOKEN)) as url:
        for args, (team, put_month, body, params), loc, message in cases:
            cli = _budget(sessions, "set", *args, *([] if "--month" in args else ["--month", month]))
            assert cli.exit_code == 2 and cli.stdout == "", args
            (line,) = cli.stderr.splitlines()
            assert line.startswith("error: ") and "Traceback" not in cli.output, line
            put = httpx.put(f"{url}/api/v1/budgets/{team}/{put_month}", json=body, params=params, headers=AUTH)
            assert put.status_code == 422, (args, put.text)
            (detail,) = put.json()["detail"]
            assert detail["loc"] == loc, (args, detail)
            if message is not None:
                assert line.startswith(f"error: {message}") and detail["msg"].startswith(message), (line, detail)
    with sessions() as session:
        assert session.query(Budget).count() == 0


def test_unknown_team_needs_yes_without_a_terminal(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    month = f"{t0:%Y-%m}"
    refused = _budget(sessions, "set", "nosuchteam", "100", "--month", month)
    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: team nosuchteam has no jobs or rules yet; known teams: __unallocated__, __unmapped__, alpha; "
        "pass --yes to set its budget anyway\n"
    )
    taken = _budget(sessions, "set", "nosuchteam", "100", "--month", month, "--yes")
    assert (taken.exit_code, taken.stdout) == (0, f"budget of team nosuchteam for {month}: 100.00 USD\n")
    again = _budget(sessions, "set", "nosuchteam", "120", "--month", month)
    assert again.exit_code == 0, "a team with a budget is known"


def _on_a_terminal(sessions, answer: str, *args: str) -> subprocess.CompletedProcess[bytes]:  # type: ignore[no-untyped-def]
    """``gpu-finops budget set ARGS`` with a terminal for stdin, answering ``answer`` to its question."""
    leader, follower = pty.openpty()
    env = {**os.environ, "FINOPS_DATABASE_URL": _url(sessions)}
    with subprocess.Popen(
        [sys.executable, "-m", "finops.cli", "budget", "set", *args],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        os.close(follower)
        os.write(leader, answer.encode() + b"\n")
        stdout, stderr = process.communicate(timeout=120)
    os.close(leader)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_unknown_team_is_confirmed_on_a_terminal(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    month = f"{t0:%Y-%m}"
    warning = b"warning: team newteam has no jobs or rules yet; known teams: __unallocated__, __unmapped__, alpha\n"
    declined = _on_a_terminal(sessions, "n", "newteam", "100", "--month", month)
    assert (declined.returncode, declined.stderr) == (1, warning + b"Aborted.\n")
    assert declined.stdout == b"Set a budget for team newteam anyway? [y/N]: "
    with sessions() as session:
        assert session.query(Budget).count() == 0
    accepted = _on_a_terminal(sessions, "y", "newteam", "100", "--month", month)
    assert (accepted.returncode, accepted.stderr) == (0, warning)
    assert accepted.stdout.endswith(f"budget of team newteam for {month}: 100.00 USD\n".encode())


def test_status_shows_a_budget_in_another_currency_as_not_comparable(loaded) -> None:  # type: ignore[no-untyped-def]
    sessions, t0, _, _ = loaded
    now_month = month_start(t0 + timedelta(hours=3))
    with sessions.begin() as session:
        team_id = team_by_name(session, "alpha").id
        session.add(Budget(team_id=team_id, month=now_month, project="", amount=Decimal(100), currency="EUR"))
    table = _budget(sessions, "status").stdout.splitlines()
    assert table[1].split()[0] == "alpha" and table[1].split()[3:4] == ["n/a"]
    assert table[1].endswith("EUR (spend in USD)")
    assert table[2] == (
        f"alpha {now_month:%Y-%m}: budget in EUR but spend in USD: not comparable; set the budget again in USD, or "
        f"delete it (gpu-finops budget set alpha AMOUNT --month {now_month:%Y-%m})"
    )
