"""REST API credentials with roles: ``gfa_<id>_<secret>`` tokens (``gpu-finops api-token create|list|revoke``).

Made, stored and checked as :mod:`finops.access.tokens` describes. Each token has a role (:data:`ROLES`):

- ``viewer`` reads everything (costs, jobs, budgets, idle episodes, events, alerts, prices, rules);
- ``team`` reads one team's data only: every list and aggregate is limited to that team;
- ``admin`` reads everything and also changes budgets, prices, pricing and team rules, silences and deliveries.

The ``FINOPS_API_TOKEN`` setting, when set, is one more admin credential (:data:`SETTING_ACTOR`). An ingest
credential (node token or the shared ``FINOPS_INGEST_TOKEN``) is none of these and never opens the REST API.

Tokens made and revoked are written to the audit log (:mod:`finops.access.audit`): id, role, team, name and expiry,
never the secret or its hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, get_args

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.access import audit, tokens
from finops.db.models import ApiToken
from finops.errors import FinopsError

TOKEN_PREFIX = "gfa_"
"""What every API token starts with (gpu-finops API), so that secret scanners and people can tell one."""
Role = Literal["viewer", "team", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)
TEAM_MAX_LENGTH = 128
"""Longest team name (characters): the width of ``teams.name``."""
NAME_MAX_LENGTH = 255
"""Longest token name (characters): the width of ``api_tokens.name``."""
SETTING_ACTOR = "api-token:FINOPS_API_TOKEN"
"""The actor of a request authenticated by the ``FINOPS_API_TOKEN`` setting (an admin)."""


@dataclass(frozen=True)
class Principal:
    """Who a request or command acts as: ``actor`` for the audit log (``api-token:<id>``, ``os-user:<login>``),
    ``role`` and, for the ``team`` role, ``team``."""

    actor: str
    role: Role
    team: str | None = None

    @property
    def team_scope(self) -> str | None:
        """The one team this principal may see (the ``team`` role), or None: every team."""
        return self.team if self.role == "team" else None

    @property
    def is_admin(self) -> bool:
        """Whether it may change things."""
        return self.role == "admin"

    def sees_team(self, team: str | None) -> bool:
        """Whether a row of ``team`` (None: of no team) is visible to it."""
        return self.role != "team" or team == self.team


ADMIN_SETTING = Principal(SETTING_ACTOR, "admin")
"""The principal of the ``FINOPS_API_TOKEN`` setting."""


def split_token(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of text shaped like an API token, else None."""
    return tokens.split_token(token, TOKEN_PREFIX)


def create_token(
    session: Session,
    role: str,
    now: datetime,
    team: str | None = None,
    name: str = "",
    expires_in: timedelta | None = None,
    *,
    actor: str,
) -> tuple[ApiToken, str]:
    """A new API token of ``role`` (one of :data:`ROLES`; ``team`` required for the ``team`` role and refused for
    the others), valid ``expires_in`` from ``now`` (None: until revoked): its row and the token text, which is stored
    nowhere. Audited as ``api_token.create`` by ``actor``. FinopsError naming the field for a bad role, team or name;
    nothing is written then."""
    if role not in ROLES:
        raise FinopsError(f"role {role!r}: one of {', '.join(ROLES)}")
    team = team.strip() if team is not None else None
    if role == "team" and not team:
        raise FinopsError("role team: give the team it may read (--team NAME)")
    if role != "team" and team is not None:
        raise FinopsError(f"role {role}: reads every team; --team is for the team role only")
    if team is not None and len(team) > TEAM_MAX_LENGTH:
        raise FinopsError(f"team {team[:64]!r}…: at most {TEAM_MAX_LENGTH} characters")
    if len(name) > NAME_MAX_LENGTH:
        raise FinopsError(f"name {name[:64]!r}…: at most {NAME_MAX_LENGTH} characters")
    token_id, secret, text = tokens.new_token(TOKEN_PREFIX)
    row = ApiToken(
        id=token_id,
        role=role,
        team=team,
        name=name,
        secret_sha256=tokens.digest(secret),
        created_at=now,
        expires_at=None if expires_in is None else now + expires_in,
    )
    session.add(row)
    session.flush()
    audit.record(session, actor, "api_token.create", f"api token {row.id}", None, _state(row), now)
    return row, text


def list_tokens(session: Session) -> list[ApiToken]:
    """Every API token by creation time, revoked and expired ones too."""
    return list(session.scalars(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)))


def revoke_token(session: Session, token_id: str, now: datetime, *, actor: str) -> tuple[ApiToken, bool]:
    """Revoke the API token ``token_id`` (its id, or the whole token text) from ``now`` on: its row and whether it
    was live until now. Audited as ``api_token.revoke`` by ``actor`` when it was not revoked yet. FinopsError for an
    unknown id."""
    row, revoked = tokens.revoke(session, ApiToken, TOKEN_PREFIX, token_id, now, "gpu-finops api-token list")
    if revoked:
        before = {**_state(row), "revoked_at": None}
        audit.record(session, actor, "api_token.revoke", f"api token {row.id}", before, _state(row), now)
    return row, revoked


def _state(row: ApiToken) -> dict[str, str | None]:
    """``row`` as the audit log keeps it: id, role, team, name, expires_at and revoked_at (ISO 8601 or None); no
    secret."""
    return {
        "id": row.id,
        "role": row.role,
        "team": row.team,
        "name": row.name,
        "expires_at": audit.iso(row.expires_at),
        "revoked_at": audit.iso(row.revoked_at),
    }


def any_live_token(session: Session, now: datetime) -> bool:
    """Whether some API token is live at ``now``."""
    return tokens.any_live(session, ApiToken, now)


def authenticate(sessions: sessionmaker[Session], token: str, now: datetime) -> Principal | None:
    """The principal of ``token`` if it is a live API token, else None (:func:`finops.access.tokens.authenticate`)."""
    row = tokens.authenticate(sessions, ApiToken, TOKEN_PREFIX, token, now)
    if row is None or row.role not in ROLES:
        return None
    return Principal(f"api-token:{row.id}", row.role, row.team)
