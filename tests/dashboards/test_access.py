"""The ID token's groups → the dashboard's roles (:func:`dashboards.access.access_of`)."""

from __future__ import annotations

import pytest

from dashboards.access import Access, GroupMapping, Refusal, access_of, groups_of, is_loopback
from finops.analysis.filters import Scope

MAPPING = GroupMapping(
    claim="groups",
    admin_groups=frozenset({"finops-admins"}),
    viewer_groups=frozenset({"finops-viewers", "finance"}),
    team_prefix="team:",
)


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (["finops-admins"], Access("admin")),
        (["finance"], Access("viewer")),
        (["team:vision"], Access("team", "vision")),
        (["staff", "team:vision", "team:vision"], Access("team", "vision")),
        (["team:vision", "finops-viewers"], Access("viewer")),  # the highest role wins
        (["team:vision", "finops-viewers", "finops-admins"], Access("admin")),
        (["team:vision", "team:nlp", "finance"], Access("viewer")),
        ("finance", Access("viewer")),  # one group as a string
    ],
)
def test_the_highest_role_of_the_groups(groups: object, expected: Access) -> None:
    assert access_of({"sub": "x", "groups": groups}, MAPPING) == expected


def test_a_team_role_sees_its_team_and_the_others_everything() -> None:
    assert Access("team", "vision").scope == Scope(team="vision")
    assert not Access("team", "vision").sees_everything
    assert Access("admin").scope == Scope() and Access("viewer").sees_everything
    assert Access("team", "vision").describe() == "team vision"


def test_groups_of_two_teams_without_a_viewer_group_are_refused_as_ambiguous() -> None:
    found = access_of({"groups": ["team:vision", "team:nlp"]}, MAPPING)
    assert isinstance(found, Refusal)
    assert "several teams (nlp, vision)" in found.reason
    assert "viewer groups (finance, finops-viewers)" in found.reason


@pytest.mark.parametrize("claims", [{}, {"groups": []}, {"groups": ["staff", "team:"]}, {"groups": 7}])
def test_groups_that_give_no_role_are_refused_with_the_groups_that_would(claims: dict[str, object]) -> None:
    found = access_of(claims, MAPPING)
    assert isinstance(found, Refusal)
    assert "a viewer group (finance, finops-viewers)" in found.reason
    assert "an admin group (finops-admins)" in found.reason
    assert "a team's group (team:<team>)" in found.reason


def test_the_claim_and_prefix_are_the_settings() -> None:
    keycloak = GroupMapping(claim="roles", team_prefix="/finops/teams/")
    assert access_of({"roles": ["/finops/teams/vision"], "groups": ["x"]}, keycloak) == Access("team", "vision")
    refused = access_of({"groups": ["team:vision"]}, keycloak)
    assert isinstance(refused, Refusal) and "none in the claim 'roles'" in refused.reason
    assert "viewer group (none configured)" in refused.reason


def test_groups_of_keeps_the_names_only() -> None:
    assert groups_of({"groups": ["a", 3, None, "b"]}, "groups") == ["a", "b"]
    assert groups_of({"groups": "a"}, "groups") == ["a"]
    assert groups_of({"groups": {"a": 1}}, "groups") == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True), ("0.0.0.0", False), ("::", False),
     ("10.0.0.5", False), ("dashboard.example.org", False)],
)  # fmt: skip
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
