"""Per-node collector credentials: ``gft_<id>_<secret>`` tokens bound to one node (``gpu-finops nodes token …``).

Made, stored and checked as :mod:`finops.access.tokens` describes (only the secret's SHA-256 is kept; one
primary-key read per request). A node token admits batches of its node only; it never opens the REST API. Tokens
made and revoked are written to the audit log (:mod:`finops.access.audit`): id, node and expiry, never the secret
or its hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from finops.access import audit, tokens
from finops.db.models import NodeToken
from finops.errors import FinopsError

TOKEN_PREFIX = "gft_"
"""What every node token starts with (gpu-finops token), so that secret scanners and people can tell one."""


@dataclass(frozen=True)
class TokenHolder:
    """Who a valid node token speaks for: the token's id and its node."""

    token_id: str
    node: str


def split_token(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of text shaped like a node token, else None."""
    return tokens.split_token(token, TOKEN_PREFIX)


def create_token(
    session: Session, node: str, now: datetime, expires_in: timedelta | None = None, *, actor: str
) -> tuple[NodeToken, str]:
    """A new token for ``node`` (valid ``expires_in`` from ``now``, None: until revoked): its row and the token text,
    which is stored nowhere. Audited as ``node_token.create`` by ``actor``. FinopsError for an empty or too long node
    name; nothing is written then."""
    node = node.strip()
    if not node or len(node) > 255:
        raise FinopsError(f"node name {node[:64]!r}: 1 to 255 characters, as the collector's batches name it")
    token_id, secret, text = tokens.new_token(TOKEN_PREFIX)
    row = NodeToken(
        id=token_id,
        node=node,
        secret_sha256=tokens.digest(secret),
        created_at=now,
        expires_at=None if expires_in is None else now + expires_in,
    )
    session.add(row)
    session.flush()
    audit.record(session, actor, "node_token.create", f"node token {row.id}", None, _state(row), now)
    return row, text


def list_tokens(session: Session, node: str | None = None) -> list[NodeToken]:
    """Every token (of ``node`` only, if given), by node and creation time; revoked and expired ones too."""
    query = select(NodeToken).order_by(NodeToken.node, NodeToken.created_at, NodeToken.id)
    if node is not None:
        query = query.where(NodeToken.node == node)
    return list(session.scalars(query))


def revoke_token(session: Session, token_id: str, now: datetime, *, actor: str) -> tuple[NodeToken, bool]:
    """Revoke the node token ``token_id`` (its id, or the whole token text) from ``now`` on: its row and whether it
    was live until now. Audited as ``node_token.revoke`` by ``actor`` when it was not revoked yet. FinopsError for an
    unknown id."""
    row, revoked = tokens.revoke(session, NodeToken, TOKEN_PREFIX, token_id, now, "gpu-finops nodes token list")
    if revoked:
        before = {**_state(row), "revoked_at": None}
        audit.record(session, actor, "node_token.revoke", f"node token {row.id}", before, _state(row), now)
    return row, revoked


def _state(row: NodeToken) -> dict[str, str | None]:
    """``row`` as the audit log keeps it: id, node, expires_at and revoked_at (ISO 8601 or None); no secret."""
    return {
        "id": row.id,
        "node": row.node,
        "expires_at": audit.iso(row.expires_at),
        "revoked_at": audit.iso(row.revoked_at),
    }


def any_live_token(session: Session, now: datetime) -> bool:
    """Whether some node token is live at ``now``."""
    return tokens.any_live(session, NodeToken, now)


def authenticate(sessions: sessionmaker[Session], token: str, now: datetime) -> TokenHolder | None:
    """The holder of ``token`` if it is a live node token, else None (unknown, wrong secret, revoked, expired);
    :func:`finops.access.tokens.authenticate`."""
    row = tokens.authenticate(sessions, NodeToken, TOKEN_PREFIX, token, now)
    return None if row is None else TokenHolder(row.id, row.node)
