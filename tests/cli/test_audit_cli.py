"""``gpu-finops audit list`` on both databases: the changes commands make are listed as the OS user's, newest first,
filtered by action, actor and time and limited; a token's text never shows; a bad --since is one error line."""

from __future__ import annotations

import getpass
from datetime import timedelta

import orjson
import pytest
from typer.testing import CliRunner, Result

from finops.cli import app
from finops.timeutil import utc_now
from tests.support import scenario


@pytest.fixture
def cli(engine, monkeypatch):  # type: ignore[no-untyped-def]
    """``gpu-finops ARGS`` on the test database."""
    monkeypatch.setenv("FINOPS_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    runner = CliRunner()

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args))

    return run


def _listed(cli, *args: str) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    result = cli("audit", "list", "--format", "json", *args)
    assert result.exit_code == 0, result.output
    return list(orjson.loads(result.stdout))


def test_commands_are_listed_as_the_os_users(cli, sessions) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        scenario.one_gpu_node(session).uuid = "GPU-1111"
    refused = cli("budget", "set", "vision", "100")  # no such team yet, and no terminal to confirm on
    assert refused.exit_code == 2 and "pass --yes" in refused.stderr
    until = f"{utc_now() + timedelta(days=30):%Y-%m-%d}"  # a silence lasts at most a year
    for args in (
        ["team", "rule", "set", "ml-train", "vision", "--kind", "namespace", "--no-rollup"],
        ["budget", "set", "vision", "100", "--month", "2026-11"],
        ["prices", "assign", "spot", "--node", "n1", "--no-rollup"],
        ["alerts", "silence", "--matcher", 'team="vision"', "--until", until, "--comment", "move"],
        ["nodes", "gpu", "replace", "n1", "0"],
        ["nodes", "token", "create", "n1"],
    ):
        result = cli(*args)
        assert result.exit_code == 0, (args, result.output)
    token = result.stdout.splitlines()[-1]
    token_id = token.split("_")[1]
    assert cli("nodes", "token", "revoke", token_id).exit_code == 0

    entries = _listed(cli)
    actions = [
        "team_rule.set", "budget.set", "pricing_rule.set", "silence.create", "gpu.replace", "node_token.create",
        "node_token.revoke",
    ]  # fmt: skip
    assert [e["action"] for e in entries] == actions[::-1]  # newest first
    assert {e["actor"] for e in entries} == {f"os-user:{getpass.getuser()}"}
    replaced = next(e for e in entries if e["action"] == "gpu.replace")
    assert replaced["subject"] == "node n1 GPU 0"
    assert (replaced["before"]["uuid"], replaced["after"]["uuid"]) == ("GPU-1111", None)
    assert entries[0]["subject"] == f"node token {token_id}"

    table = cli("audit", "list")
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[:4] == ["at", "(UTC)", "actor", "action"]
    lines = table.stdout.splitlines()[1:]
    assert len(lines) == 2 * len(actions)
    assert lines[-2].split()[1:] == [f"os-user:{getpass.getuser()}", "team_rule.set", "namespace", "ml-train"]
    assert lines[-1].strip().startswith("- → {")
    secret = token.split("_", 2)[2]
    assert secret not in table.stdout and secret not in orjson.dumps(entries).decode()


def test_filters_limit_and_bad_times(cli) -> None:  # type: ignore[no-untyped-def]
    for account in ("a", "b", "c"):
        assert cli("team", "map", account, "vision", "--no-rollup").exit_code == 0
    assert cli("team", "rule", "delete", "b", "--kind", "account", "--no-rollup").exit_code == 0
    assert [e["subject"] for e in _listed(cli, "--action", "team_rule.set")] == ["account c", "account b", "account a"]
    assert [e["action"] for e in _listed(cli, "--limit", "2")] == ["team_rule.delete", "team_rule.set"]
    assert len(_listed(cli, "--actor", f"os-user:{getpass.getuser()}")) == 4
    assert _listed(cli, "--actor", "os-user:nobody-else") == []
    assert _listed(cli, "--until", "2000-01") == [] and len(_listed(cli, "--since", "2000-01-01")) == 4
    assert cli("audit", "list", "--until", "2000-01").stdout == "no audit entries\n"
    for option in ("--since", "--until"):
        bad = cli("audit", "list", option, "yesterday")
        assert bad.exit_code == 2 and bad.stdout == ""
        assert bad.stderr.splitlines() == [
            f"error: {option}: 'yesterday' is neither a month (2026-11), a day (2026-11-24) nor an ISO 8601 time"
        ]
    assert cli("audit", "list", "--limit", "0").exit_code == 2
    assert cli("audit", "list", "--format", "csv").exit_code == 2
