"""Who sees what on the dashboard: the groups of a person's ID token mapped to a role, the roles of the REST API.

- ``admin`` and ``viewer`` see every team (the dashboard only reads, so an admin sees what a viewer sees);
- ``team`` sees one team: every page is limited to it, and the pages of the whole fleet are not offered.

A person's groups are the ID-token claim ``FINOPS_DASHBOARD_OIDC_GROUPS_CLAIM`` (a list of names, or one name).
The highest role any group gives wins: a member of an admin group is admin, else of a viewer group viewer, else a
group named the team prefix and a team (``team:vision``) makes them ``team`` of that team. Someone in the groups of
two or more teams (and no viewer or admin group) is refused, as is someone whose groups give no role: the refusal
says which groups would. Names are compared exactly (case included).

Only :func:`access_of` decides; it is pure (no Streamlit), so that the mapping is tested on its own. Without a
log-in, everyone is a viewer, which is why the dashboard then listens on a loopback address (:func:`is_loopback`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from finops.access.api_tokens import Role
from finops.analysis.filters import Scope


@dataclass(frozen=True, slots=True)
class GroupMapping:
    """Which groups give which role: the ``FINOPS_DASHBOARD_*`` settings of the mapping.

    ``claim`` is the ID-token claim with the groups; ``admin_groups`` and ``viewer_groups`` are group names;
    ``team_prefix`` starts the name of a team's group (the rest is the team)."""

    claim: str = "groups"
    admin_groups: frozenset[str] = frozenset()
    viewer_groups: frozenset[str] = frozenset()
    team_prefix: str = "team:"


@dataclass(frozen=True, slots=True)
class Access:
    """What one person may see: a role (the REST API's, :data:`finops.access.api_tokens.Role`) and, for the ``team``
    role, the team (None otherwise)."""

    role: Role
    team: str | None = None

    @property
    def sees_everything(self) -> bool:
        """True for ``viewer`` and ``admin``: every team, and the pages of the whole fleet."""
        return self.team is None

    @property
    def scope(self) -> Scope:
        """The filter every query of this person's pages must stay within: their team, or everything."""
        return Scope(team=self.team)

    def describe(self) -> str:
        """``viewer``, ``admin`` or ``team vision``, for the sidebar."""
        return self.role if self.team is None else f"{self.role} {self.team}"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why someone who logged in may not see the dashboard, in a sentence that names the groups that would let
    them in."""

    reason: str


EVERYONE = Access("viewer")
"""The access of everyone when the dashboard has no log-in (it then listens on loopback only)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an IP address or ``localhost``) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def groups_of(claims: Mapping[str, object], claim: str) -> list[str]:
    """The person's groups: the claim's names when it is a list (items that are not strings left out), ``[name]``
    when it is one string, ``[]`` when it is absent or anything else."""
    found = claims.get(claim)
    if isinstance(found, str):
        return [found]
    if isinstance(found, list | tuple):
        return [item for item in found if isinstance(item, str)]
    return []


def access_of(claims: Mapping[str, object], mapping: GroupMapping) -> Access | Refusal:
    """The access the ID token's ``claims`` give under ``mapping``: the highest role of the person's groups
    (admin, then viewer, then one team), or a :class:`Refusal` when their groups give none or name several teams
    and no viewer or admin group."""
    groups = groups_of(claims, mapping.claim)
    if mapping.admin_groups.intersection(groups):
        return Access("admin")
    if mapping.viewer_groups.intersection(groups):
        return Access("viewer")
    teams = sorted({group.removeprefix(mapping.team_prefix) for group in _team_groups(groups, mapping.team_prefix)})
    if len(teams) == 1:
        return Access("team", teams[0])
    if teams:
        return Refusal(
            f"your groups name several teams ({', '.join(teams)}) and a team member sees one team: ask for one "
            f"of the viewer groups ({_names(mapping.viewer_groups)}) or to keep one team's group"
        )
    needed = [f"a viewer group ({_names(mapping.viewer_groups)})", f"an admin group ({_names(mapping.admin_groups)})"]
    needed.append(f"a team's group ({mapping.team_prefix}<team>)")
    shown = ", ".join(groups) if groups else f"none in the claim {mapping.claim!r}"
    return Refusal(f"your groups ({shown}) give no access to the dashboard: it needs {'; '.join(needed)}")


def _team_groups(groups: Iterable[str], prefix: str) -> list[str]:
    """The groups that are a team's: the prefix and at least one more character."""
    return [group for group in groups if group.startswith(prefix) and len(group) > len(prefix)]


def _names(groups: frozenset[str]) -> str:
    """``finops-viewers, sre`` (sorted), or ``none configured``."""
    return ", ".join(sorted(groups)) if groups else "none configured"
