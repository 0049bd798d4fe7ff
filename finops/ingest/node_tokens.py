"""Per-node collector credentials: ``gft_<id>_<secret>`` tokens bound to one node (``gpu-finops nodes token …``).

A token is made by :func:`create_token`, shown once and never stored: the table (:class:`finops.db.models.NodeToken`)
holds its public ``id`` (16 hex characters, what ``list`` and ``revoke`` name) and the SHA-256 of its secret
(``secrets.token_urlsafe(32)``: 256 random bits). A fast, unsalted hash is enough here: a slow password hash (bcrypt,
scrypt, Argon2) exists to make guessing a low-entropy, human-chosen password expensive, but a 256-bit random secret
cannot be guessed however fast the hash is, and a salt only defeats precomputed tables of likely inputs, of which
there are none (GitHub stores its tokens and Kubernetes its bootstrap-token-like service tokens the same way). The
stored hash is compared in constant time (:func:`hmac.compare_digest`).

:func:`authenticate` reads one row by primary key per request; ``last_used_at`` is written at most once a minute
(:data:`LAST_USED_RESOLUTION`), in a transaction of its own, so that a collector's batches cause no write each.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import exists, or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import NodeToken
from finops.errors import FinopsError

log = logging.getLogger(__name__)

TOKEN_PREFIX = "gft_"
"""What every node token starts with (gpu-finops token), so that secret scanners and people can tell one."""
SECRET_BYTES = 32
"""Random bytes of a token's secret (``secrets.token_urlsafe``: 43 characters)."""
ID_BYTES = 8
"""Random bytes of a token's public id (16 hex characters)."""
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""``last_used_at`` is written when it is older than this: at most one write a minute per token."""
_DURATION = re.compile(r"^([1-9][0-9]{0,5})([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class TokenHolder:
    """Who a valid node token speaks for: the token's id and its node."""

    token_id: str
    node: str


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``2w``, ``30m``, ``45s`` (Prometheus and Grafana spell durations so) as a timedelta;
    FinopsError otherwise."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise FinopsError(f"duration {text!r}: give a number and a unit, one of s, m, h, d, w (e.g. 90d)")
    return timedelta(seconds=int(match[1]) * _UNITS[match[2]])


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_token(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of text shaped like a node token, else None."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    token_id, _, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if len(token_id) != 2 * ID_BYTES or not secret or not all(c in "0123456789abcdef" for c in token_id):
        return None
    return token_id, secret


def create_token(
    session: Session, node: str, now: datetime, expires_in: timedelta | None = None
) -> tuple[NodeToken, str]:
    """A new token for ``node`` (valid ``expires_in`` from ``now``, None: until revoked): its row and the token text,
    which is stored nowhere. FinopsError for an empty or too long node name."""
    node = node.strip()
    if not node or len(node) > 255:
        raise FinopsError(f"node name {node[:64]!r}: 1 to 255 characters, as the collector's batches name it")
    token_id, secret = secrets.token_hex(ID_BYTES), secrets.token_urlsafe(SECRET_BYTES)
    row = NodeToken(
        id=token_id,
        node=node,
        secret_sha256=_digest(secret),
        created_at=now,
        expires_at=None if expires_in is None else now + expires_in,
    )
    session.add(row)
    session.flush()
    return row, f"{TOKEN_PREFIX}{token_id}_{secret}"


def list_tokens(session: Session, node: str | None = None) -> list[NodeToken]:
    """Every token (of ``node`` only, if given), by node and creation time; revoked and expired ones too."""
    query = select(NodeToken).order_by(NodeToken.node, NodeToken.created_at, NodeToken.id)
    if node is not None:
        query = query.where(NodeToken.node == node)
    return list(session.scalars(query))


def revoke_token(session: Session, token_id: str, now: datetime) -> tuple[NodeToken, bool]:
    """Revoke the token ``token_id`` (its id, or the whole token text) from ``now`` on: its row and whether it was
    live until now (False: already revoked, its first revocation time kept). FinopsError for an unknown id."""
    parts = split_token(token_id)
    key = parts[0] if parts else token_id.strip()
    row = session.get(NodeToken, key)
    if row is None:
        raise FinopsError(f"no node token {key!r}; `gpu-finops nodes token list` shows them")
    if row.revoked_at is not None:
        return row, False
    row.revoked_at = now
    return row, True


def live(row: NodeToken, now: datetime) -> bool:
    """Whether ``row`` admits batches at ``now``: not revoked and not expired."""
    return row.revoked_at is None and (row.expires_at is None or now < row.expires_at)


def any_live_token(session: Session, now: datetime) -> bool:
    """Whether some node token is live at ``now``."""
    unexpired = or_(NodeToken.expires_at.is_(None), NodeToken.expires_at > now)
    return bool(session.scalar(select(exists().where(NodeToken.revoked_at.is_(None), unexpired))))


def authenticate(sessions: sessionmaker[Session], token: str, now: datetime) -> TokenHolder | None:
    """The holder of ``token`` if it is a live node token, else None (unknown, wrong secret, revoked, expired).
    One primary-key read; ``last_used_at`` updated when older than :data:`LAST_USED_RESOLUTION` (a failure to
    write it, such as a busy database, is logged and does not refuse the token)."""
    parts = split_token(token)
    if parts is None:
        return None
    token_id, secret = parts
    with sessions() as session:
        row = session.get(NodeToken, token_id)
        if row is None:
            return None
        session.expunge(row)
    if not hmac.compare_digest(row.secret_sha256, _digest(secret)) or not live(row, now):
        return None
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        stale = or_(NodeToken.last_used_at.is_(None), NodeToken.last_used_at <= now - LAST_USED_RESOLUTION)
        try:
            with sessions.begin() as session:
                session.execute(update(NodeToken).where(NodeToken.id == token_id, stale).values(last_used_at=now))
        except OperationalError as exc:
            log.info("node token %s: last use not recorded (%s)", token_id, exc.orig)
    return TokenHolder(token_id, row.node)
