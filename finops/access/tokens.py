"""Bearer tokens stored as hashes, shared by node tokens (:mod:`finops.ingest.node_tokens`, ``gft_``) and API tokens
(:mod:`finops.access.api_tokens`, ``gfa_``).

A token is ``<prefix><id>_<secret>``. It is made by :func:`new_token`, shown once and never stored: its table holds
its public ``id`` (16 hex characters, what ``list`` and ``revoke`` name) and the SHA-256 of its secret
(``secrets.token_urlsafe(32)``: 256 random bits). A fast, unsalted hash is enough here: a slow password hash (bcrypt,
scrypt, Argon2) exists to make guessing a low-entropy, human-chosen password expensive, but a 256-bit random secret
cannot be guessed however fast the hash is, and a salt only defeats precomputed tables of likely inputs, of which
there are none (GitHub stores its tokens the same way). The stored hash is compared in constant time
(:func:`hmac.compare_digest`).

:func:`authenticate` reads one row by primary key per request; ``last_used_at`` is written at most once a minute
(:data:`LAST_USED_RESOLUTION`), in a transaction of its own, so that a client's requests cause no write each.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import exists, or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from finops.db.models import ApiToken, NodeToken
from finops.errors import FinopsError
from finops.timeutil import parse_duration

log = logging.getLogger(__name__)

SECRET_BYTES = 32
"""Random bytes of a token's secret (``secrets.token_urlsafe``: 43 characters)."""
ID_BYTES = 8
"""Random bytes of a token's public id (16 hex characters)."""
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""``last_used_at`` is written when it is older than this: at most one write a minute per token."""

Row = TypeVar("Row", NodeToken, ApiToken)


def parse_lifetime(text: str) -> timedelta:
    """A token's lifetime: a duration as :func:`finops.timeutil.parse_duration` reads one (``90d``, ``12h``, ``2w``,
    ``1h30m``), more than 0; FinopsError otherwise."""
    try:
        lifetime = parse_duration(text)
    except ValueError as exc:
        raise FinopsError(f"lifetime: {exc}") from None
    if lifetime <= timedelta(0):
        raise FinopsError(f"lifetime {text!r}: a token must live more than 0 s")
    return lifetime


def digest(secret: str) -> str:
    """The hex SHA-256 of ``secret``, as stored in ``secret_sha256``."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token(prefix: str) -> tuple[str, str, str]:
    """A fresh ``(id, secret, token text)`` with ``prefix``; store ``id`` and :func:`digest` of ``secret`` only."""
    token_id, secret = secrets.token_hex(ID_BYTES), secrets.token_urlsafe(SECRET_BYTES)
    return token_id, secret, f"{prefix}{token_id}_{secret}"


def split_token(token: str, prefix: str) -> tuple[str, str] | None:
    """``(id, secret)`` of text shaped like a token with ``prefix``, else None."""
    if not token.startswith(prefix):
        return None
    token_id, _, secret = token[len(prefix) :].partition("_")
    if len(token_id) != 2 * ID_BYTES or not secret or not all(c in "0123456789abcdef" for c in token_id):
        return None
    return token_id, secret


def live(row: NodeToken | ApiToken, now: datetime) -> bool:
    """Whether ``row`` admits requests at ``now``: not revoked and not expired."""
    return row.revoked_at is None and (row.expires_at is None or now < row.expires_at)


def state(row: NodeToken | ApiToken, now: datetime) -> str:
    """``live``, ``revoked`` or ``expired``: what ``list`` commands show."""
    if live(row, now):
        return "live"
    return "revoked" if row.revoked_at is not None else "expired"


def any_live(session: Session, model: type[Row], now: datetime) -> bool:
    """Whether some token of ``model`` is live at ``now``."""
    unexpired = or_(model.expires_at.is_(None), model.expires_at > now)
    return bool(session.scalar(select(exists().where(model.revoked_at.is_(None), unexpired))))


def revoke(
    session: Session, model: type[Row], prefix: str, token_id: str, now: datetime, list_command: str
) -> tuple[Row, bool]:
    """Revoke the token ``token_id`` (its id, or the whole token text) of ``model`` from ``now`` on: its row and
    whether it was live until now (False: already revoked, its first revocation time kept). FinopsError for an
    unknown id, naming ``list_command`` (e.g. ``gpu-finops nodes token list``), which shows them."""
    parts = split_token(token_id, prefix)
    key = parts[0] if parts else token_id.strip()
    row = session.get(model, key)
    if row is None:
        raise FinopsError(f"no token {key!r}; `{list_command}` shows them")
    if row.revoked_at is not None:
        return row, False
    row.revoked_at = now
    return row, True


def authenticate(
    sessions: sessionmaker[Session], model: type[Row], prefix: str, token: str, now: datetime
) -> Row | None:
    """The row (transient: in no session) of ``token`` if it is a live token of ``model``, else None (not shaped
    like one, unknown, wrong secret, revoked, expired). One primary-key read; ``last_used_at`` updated when older than
    :data:`LAST_USED_RESOLUTION` (a failure to write it, such as a busy database, is logged and does not refuse the
    token)."""
    parts = split_token(token, prefix)
    if parts is None:
        return None
    token_id, secret = parts
    # A Core read of the row's columns on a pooled connection: a third of what an ORM Session.get costs.
    engine = sessions.kw["bind"]
    with engine.connect() as connection:
        found = connection.execute(select(*model.__table__.columns).where(model.id == token_id)).one_or_none()
    if found is None:
        return None
    row = model(**found._asdict())
    if not hmac.compare_digest(row.secret_sha256, digest(secret)) or not live(row, now):
        return None
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        stale = or_(model.last_used_at.is_(None), model.last_used_at <= now - LAST_USED_RESOLUTION)
        try:
            with sessions.begin() as session:
                session.execute(update(model).where(model.id == token_id, stale).values(last_used_at=now))
        except OperationalError as exc:
            log.info("token %s: last use not recorded (%s)", token_id, exc.orig)
    return row
