"""Alerts into an existing Alertmanager: the alerts a route with ``alertmanager`` targets takes are posted to that
Alertmanager's API v2, so the site's own routing, grouping, silences, inhibition and receivers apply to them.

Format: Alertmanager API v2, ``api/v2/openapi.yaml`` (``POST /api/v2/alerts``, body ``postableAlerts``: a JSON
array of ``{labels, annotations, startsAt, endsAt, generatorURL}``; label and annotation names match
``[a-zA-Z_][a-zA-Z0-9_]*``; answers 200, or 400 for an invalid alert and 5xx when Alertmanager cannot take it).
Each alert (:func:`postable_alert`) carries:

- labels: ``alertname`` (the rule, e.g. ``idle-gpu``) and all of ours (``rule``, ``severity``, ``team``, ``job``,
  ``user``, ``node``, ``gpu``, ``day``, as the rule gives them; empty values left out, as Prometheus does);
- annotations: ``title``, ``summary`` and one per message field, its name in snake case (``Cost so far`` →
  ``cost_so_far``), every value a string;
- ``startsAt`` when the condition began; ``endsAt`` when it ended, or for a firing alert ``now + hold`` (below);
- ``generatorURL``: its dashboard page under ``FINOPS_ALERT_DASHBOARD_URL`` (left out when that is empty).

When (:func:`queue_updates`, in the evaluation's own transaction): after every evaluation, one outbox row per
Alertmanager with every firing alert routed to it and those that resolved in the last :data:`RESOLVED_RESEND`,
as Prometheus sends its alerts (``rules/alerting.go``: resent every evaluation, at most every ``resend-delay``
(1 min); ``endsAt`` = ``4 × max(evaluation interval, resend-delay)`` ahead; resolved ones resent for 15 min). A
firing alert Alertmanager stops hearing about thus resolves there on its own once its ``endsAt`` passes; Alertmanager's
``resolve_timeout`` does not apply, since ``endsAt`` is always set. A newer update supersedes the older ones of its
Alertmanager: they are deleted unsent, so a retried old update can never bring back an alert a newer one resolved.
Delivered updates are kept :data:`KEEP_DELIVERED`.
"""

from __future__ import annotations

import base64
import re
import ssl
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import and_, delete, or_, select
from sqlalchemy.orm import Session

from alerts.config import AlertConfig
from alerts.engine import queue
from alerts.models import AlertDelivery, AlertInstance
from alerts.render import dashboard_link
from alerts.webhooks import Attempt, post_json, redact
from finops.settings.alerts import AlertmanagerTarget

CHANNEL = "alertmanager"
API_PATH = "/api/v2/alerts"
RESEND_FLOOR = timedelta(minutes=1)
"""Prometheus' default ``--rules.alert.resend-delay``: the hold is 4 × the evaluation interval, but at least 4 min."""
RESOLVED_RESEND = timedelta(minutes=15)
"""How long a resolved alert is still sent, so an Alertmanager that missed an update learns it (Prometheus' 15 min)."""
KEEP_DELIVERED = timedelta(days=1)
"""Delivered updates of an Alertmanager older than this are deleted when a newer one is queued."""

_NOT_NAME = re.compile(r"[^a-z0-9_]+")


def hold_for(evaluation_interval: timedelta) -> timedelta:
    """How far ahead a firing alert's ``endsAt`` is set: 4 × max(``evaluation_interval``, :data:`RESEND_FLOOR`)."""
    return 4 * max(evaluation_interval, RESEND_FLOOR)


def _timestamp(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def annotation_name(name: str) -> str:
    """A message field's name as an annotation name: lower case, runs of other characters as ``_``
    (``"Cost so far"`` → ``"cost_so_far"``), ``_`` before a leading digit, ``field`` for nothing left."""
    found = _NOT_NAME.sub("_", name.lower()).strip("_") or "field"
    return f"_{found}" if found[0].isdigit() else found


def postable_alert(instance: AlertInstance, now: datetime, hold: timedelta, dashboard_url: str) -> dict[str, Any]:
    """``instance`` as one element of ``postableAlerts`` (module docstring: labels, annotations, times, link).

    A firing alert ends at ``now + hold``, or at its own end if that is sooner (a budget alert's month end); a
    resolved one at the instant it resolved."""
    labels = {"alertname": instance.rule, **{name: value for name, value in instance.labels.items() if value}}
    notes = instance.annotations
    annotations = {"title": str(notes.get("title", instance.rule)), "summary": str(notes.get("summary", ""))}
    fields = notes.get("fields")
    for name, value in fields if isinstance(fields, list) else []:
        annotations.setdefault(annotation_name(str(name)), str(value))
    ends = now + hold
    if instance.ends_at is not None and (instance.state == "resolved" or instance.ends_at < ends):
        ends = instance.ends_at
    alert: dict[str, Any] = {
        "labels": labels,
        "annotations": annotations,
        "startsAt": _timestamp(instance.starts_at),
        "endsAt": _timestamp(max(ends, instance.starts_at)),
    }
    link = dashboard_link(dashboard_url, notes)
    if link is not None:
        alert["generatorURL"] = link
    return alert


def routed(instances: Iterable[AlertInstance], config: AlertConfig) -> dict[str, list[AlertInstance]]:
    """Alertmanager name → the ``instances`` whose route (:meth:`AlertConfig.route_for`) names it, in the order
    given; Alertmanagers with none are left out."""
    found: dict[str, list[AlertInstance]] = {}
    for instance in instances:
        _, route = config.route_for(instance.labels)
        for name in route.alertmanager:
            found.setdefault(name, []).append(instance)
    return found


def queue_updates(
    session: Session,
    config: AlertConfig,
    now: datetime,
    *,
    evaluation_interval: timedelta,
    dashboard_url: str,
    deadline: timedelta,
) -> list[int]:
    """Queue one update per Alertmanager that some route sends to (module docstring: which alerts, ``endsAt``) in
    the caller's transaction, after deleting that Alertmanager's older updates not delivered and its delivered
    ones older than :data:`KEEP_DELIVERED`. Returns the new outbox ids (none when no route names an Alertmanager)."""
    if not any(route.alertmanager for route in (*config.routes, config.default_route)):
        return []
    recent = or_(
        AlertInstance.state == "firing",
        and_(AlertInstance.state == "resolved", AlertInstance.ends_at >= now - RESOLVED_RESEND),
    )
    instances = session.scalars(
        select(AlertInstance).where(recent).order_by(AlertInstance.starts_at, AlertInstance.fingerprint)
    )
    found = routed(instances, config)
    if not found:
        return []
    session.execute(
        delete(AlertDelivery).where(
            AlertDelivery.channel == CHANNEL,
            AlertDelivery.target.in_(sorted(found)),
            or_(AlertDelivery.status != "delivered", AlertDelivery.created_at < now - KEEP_DELIVERED),
        )
    )
    hold = hold_for(evaluation_interval)
    ids: list[int] = []
    for name, chosen in sorted(found.items()):
        alerts = [postable_alert(instance, now, hold, dashboard_url) for instance in chosen]
        resolved = sum(1 for instance in chosen if instance.state == "resolved")
        title = f"Alertmanager update: {len(chosen) - resolved} firing, {resolved} resolved"
        ids += queue(session, [(CHANNEL, name)], {"alerts": alerts}, title, None, now, deadline)
    return ids


def authorization(target: AlertmanagerTarget) -> dict[str, str]:
    """The ``Authorization`` header for ``target``, its credential files read now (so rotated ones are used):
    ``Bearer <token>`` or ``Basic <user:password in base64>``; empty without credentials. OSError from a read."""
    if target.bearer_token_file is not None:
        return {"Authorization": f"Bearer {target.bearer_token_file.read_text().strip()}"}
    if target.username is not None and target.password_file is not None:
        pair = f"{target.username}:{target.password_file.read_text().strip()}".encode()
        return {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}
    return {}


def post_alerts(client: httpx.Client, target: AlertmanagerTarget, alerts: Sequence[Mapping[str, Any]]) -> Attempt:
    """POST ``alerts`` (``postableAlerts``) to ``target``'s ``/api/v2/alerts`` once: 200 ``delivered``, 400 and
    other 4xx ``refused``, 5xx, 429 and network errors ``failed`` (:func:`alerts.webhooks.post_json`); an unreadable
    credential file is ``failed`` too (it may be mounted later), named by its path."""
    url = target.url.rstrip("/") + API_PATH
    try:
        headers = authorization(target)
    except OSError as exc:
        return Attempt("failed", f"{redact(url)}: cannot read a credential file: {exc.filename}: {exc.strerror}")
    return post_json(client, url, list(alerts), headers)


def transports(targets: Iterable[AlertmanagerTarget]) -> dict[str, httpx.BaseTransport]:
    """HTTP client mounts that check the certificate of each target with a ``ca_file`` against that bundle, keyed
    by its scheme and host (``https://am.example:9093``); other hosts keep the client's own verification."""
    mounts: dict[str, httpx.BaseTransport] = {}
    for target in targets:
        if target.ca_file is not None:
            url = httpx.URL(target.url)
            key = f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")
            mounts[key] = httpx.HTTPTransport(verify=ssl.create_default_context(cafile=str(target.ca_file)))
    return mounts
