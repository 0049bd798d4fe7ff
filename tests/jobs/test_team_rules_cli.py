"""gpu-finops team rule set|delete|list through typer's CliRunner, on both databases."""

from __future__ import annotations

from pathlib import Path

import orjson
from sqlalchemy import select
from typer.testing import CliRunner, Result

from finops.access.audit import list_entries
from finops.cli import app
from finops.db.models import UNMAPPED_TEAM, Job, Team
from finops.jobs.kubernetes_import import import_pods
from finops.timeutil import utc_now

PODS = Path(__file__).parents[1] / "fixtures" / "kubernetes" / "pods.json"


def _invoke(database_url: str, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"FINOPS_DATABASE_URL": database_url})


def _words(result: Result) -> str:
    """The output with the error box's frame and line wrapping taken out."""
    return " ".join(result.output.replace("│", " ").split())


def _teams(sessions) -> dict[str, str]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        rows = session.execute(select(Job.job_id, Team.name).join(Team, Team.id == Job.team_id)).all()
    return {job_id: team for job_id, team in rows}


def test_rules_set_list_and_delete_move_jobs(engine, sessions, database_url: str) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        import_pods(session, orjson.loads(PODS.read_bytes()), source="pods.json", listed_at=utc_now())
    assert set(_teams(sessions).values()) == {UNMAPPED_TEAM}

    by_namespace = _invoke(database_url, "team", "rule", "set", "--kind", "namespace", "ml-train", "ml-platform")
    assert by_namespace.exit_code == 0, by_namespace.output
    assert by_namespace.output.splitlines()[0] == "namespace ml-train → team ml-platform; 3 jobs moved"
    assert by_namespace.output.splitlines()[1].startswith("rollup: "), "the moved jobs' hours are rolled up"
    by_label = _invoke(database_url, "team", "rule", "set", "--kind", "label", "--key", "team", "nlp", "nlp")
    # The default precedence: the namespace's rule is never overridden by a pod's own label.
    assert by_label.output.splitlines()[0] == "label team=nlp → team nlp; 0 jobs moved"
    by_account = _invoke(database_url, "team", "rule", "set", "--kind", "account", "inference", "serving")
    assert by_account.output.splitlines()[0] == "account inference → team serving; 2 jobs moved"
    teams = _teams(sessions)
    assert teams["ml-train/llama-ft-0"] == "ml-platform"
    assert teams["ml-train/eval-7f9c"] == teams["ml-train/preproc-2"] == "ml-platform"  # namespace before label
    assert teams["inference/vllm-small-5d8b7c9f4-x2x4z"] == "serving"  # a pod's account is its namespace
    shown = _invoke(database_url, "team", "rule", "precedence")
    assert shown.output.splitlines() == ["namespace: namespace, account, label"]

    labels_first = _invoke(database_url, "team", "rule", "precedence", "label")
    assert labels_first.exit_code == 0, labels_first.output
    assert labels_first.output.splitlines()[0] == "team rule precedence label: label, namespace, account; 2 jobs moved"
    teams = _teams(sessions)
    assert teams["ml-train/eval-7f9c"] == teams["ml-train/preproc-2"] == "nlp"  # label before namespace
    assert teams["ml-train/llama-ft-0"] == "ml-platform"

    listing = _invoke(database_url, "team", "rule", "list")
    assert listing.exit_code == 0
    assert [line.split() for line in listing.output.splitlines()] == [
        ["precedence:", "label,", "namespace,", "account"],
        ["kind", "key", "value", "team"],
        ["label", "team", "nlp", "nlp"],
        ["namespace", "-", "ml-train", "ml-platform"],
        ["account", "-", "inference", "serving"],
    ]

    deleted = _invoke(database_url, "team", "rule", "delete", "--kind", "label", "--key", "team", "nlp")
    assert deleted.output.splitlines()[0] == "deleted label team=nlp → team nlp; 2 jobs moved"
    assert _teams(sessions)["ml-train/eval-7f9c"] == "ml-platform"
    again = _invoke(database_url, "team", "rule", "delete", "--kind", "label", "--key", "team", "nlp")
    assert again.exit_code == 2 and "no rule for label team=nlp" in again.output
    bad = _invoke(database_url, "team", "rule", "precedence", "pod")
    assert bad.exit_code == 2 and "team rule precedence must be one of namespace, label" in _words(bad)
    with sessions() as session:
        [entry] = list_entries(session, action="team_rule.precedence")
    assert (entry.before, entry.after) == ({"precedence": "namespace"}, {"precedence": "label", "jobs_moved": 2})


def test_team_map_is_an_account_rule(engine, database_url: str) -> None:  # type: ignore[no-untyped-def]
    assert _invoke(database_url, "team", "map", "acct-a", "alpha").exit_code == 0
    listing = _invoke(database_url, "team", "rule", "list")
    assert listing.output.splitlines()[2].split() == ["account", "-", "acct-a", "alpha"]


def test_bad_rules_are_refused(engine, database_url: str) -> None:  # type: ignore[no-untyped-def]
    no_key = _invoke(database_url, "team", "rule", "set", "--kind", "label", "nlp", "nlp")
    assert no_key.exit_code == 2 and "a label rule needs a label name" in _words(no_key)
    stray_key = _invoke(database_url, "team", "rule", "set", "--kind", "account", "--key", "x", "acct", "t")
    assert stray_key.exit_code == 2 and "account and namespace rules have none" in _words(stray_key)
    kind = _invoke(database_url, "team", "rule", "delete", "--kind", "project", "x")
    assert kind.exit_code == 2 and "rule kind must be one of label, namespace, account" in _words(kind)
    assert _invoke(database_url, "team", "rule", "list").output.splitlines()[2:] == []
