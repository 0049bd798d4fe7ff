"""Kubernetes pods stored as jobs (the pods are read by :mod:`finops.jobs.kubernetes`).

A pod is stored as a :class:`finops.db.models.Job` with ``scheduler`` "kubernetes", ``job_id`` ``namespace/name``,
``job_id_raw`` its UID, ``account`` and ``namespace`` its namespace, ``user`` its ``user`` label marked as claimed
(``claimed:alice``: :func:`claimed_user`), ``project`` its ``project`` label, ``partition`` its node pool (node
label, else node selector: :data:`NODE_POOL_LABELS`), ``node_list`` its node, ``state`` its phase. It starts at
``status.startTime`` (else the earliest container start) and, once Succeeded or Failed, ends at the latest container
``finishedAt``; a running pod is open. Its team comes from the team rules in the site's precedence (by default
namespace, then account = namespace, then label: :mod:`finops.jobs.teams`). MIG instances hold their profile's
share of one GPU (:mod:`finops.jobs.mig`), so several pods may share a GPU.

Pods that vanish: a pod that ended is deleted from the API server sooner or later, so a later listing may
miss it. Only when the caller says the listing is complete (``complete=True``: every namespace, no selector)
are pods still open in the database but absent from the listing ended, at the listing's time, with state
``Deleted``; the listing's time is an upper bound of when they ended. A partial listing ends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from finops.db.hours import HourMarks
from finops.db.models import CLAIMED_USER_PREFIX, Job
from finops.jobs.gpu_calendar import Unit
from finops.jobs.kubernetes import (
    MIG_RESOURCE_PREFIX,
    Pod,
    PodError,
    PodFieldError,
    PodListing,
    node_pool,
    parse_pods,
    product_model,
)
from finops.jobs.mig import mig_share
from finops.jobs.nodes import ensure_nodes, node_models
from finops.jobs.placement import PlacementRequest, job_keys, place_jobs
from finops.jobs.store import replace_job, update_end
from finops.jobs.teams import TeamRules
from finops.timeutil import to_epoch


@dataclass
class PodImportResult:
    """What :func:`import_pods` did: GPU pods stored, pods without GPUs, GPU pods that have not run,
    open pods ended because a complete listing lacks them, nodes whose labels were stored, and errors."""

    jobs: int = 0
    without_gpus: int = 0
    not_started: int = 0
    ended_missing: int = 0
    nodes_labelled: int = 0
    errors: list[PodError] = field(default_factory=list)


def import_pods(
    session: Session,
    document: Any,
    *,
    source: str,
    cluster: str = "default",
    listed_at: datetime,
    complete: bool = False,
    nodes: Mapping[str, dict[str, str]] | None = None,
) -> PodImportResult:
    """Store the GPU pods of a Pod list (parsed JSON) in the caller's transaction.

    ``listed_at``: when the listing was taken (aware). ``complete``: the listing holds every pod of the cluster,
    so open pods missing from it are ended at ``listed_at``. ``nodes``: node name -> labels (from
    :func:`parse_nodes`), stored on the nodes and used for the pods' node pools and GPU models. Re-importing
    a listing changes nothing; a pod seen running and now Succeeded or Failed only has its end, state, labels
    and team updated. Bad pods are returned in ``errors``; the rest is imported.

    Raises :class:`KubernetesFormatError` when the document is not a Pod list.
    """
    listing = parse_pods(document, source=source)
    result = PodImportResult(without_gpus=listing.without_gpus, errors=list(listing.errors))
    stored_nodes = ensure_nodes(session, set(nodes or {}) | {p.node for p in listing.pods if p.node})
    for name, labels in (nodes or {}).items():
        if stored_nodes[name].labels != labels:
            stored_nodes[name].labels = labels
        result.nodes_labelled += 1
    node_labels = {name: node.labels or {} for name, node in stored_nodes.items()}
    running = [p for p in listing.pods if p.start is not None]
    result.not_started = len(listing.pods) - len(running)
    running.sort(key=lambda p: (p.start, p.uid))
    existing = _known_pods(session, cluster, [p.uid for p in listing.pods])
    models = node_models(session, {p.node for p in running})
    teams = TeamRules(session)
    marks = HourMarks()
    added: list[tuple[Job, Pod, list[Unit], str | None]] = []
    # No flush until all are added (update_end's UPDATE would flush): the new jobs go in batched inserts.
    with session.no_autoflush:
        for pod in running:
            labels = node_labels.get(pod.node, {})
            model = models.get(pod.node) or product_model(labels)
            try:
                units = _units(pod, model)
            except PodFieldError as exc:
                message = f"{source}: pod {pod.job_id}: field {exc.path}: {exc}"
                result.errors.append(PodError(pod.job_id, exc.path, message))
                continue
            team_id = teams.team_id(pod.namespace, pod.namespace, pod.labels)
            job = existing.get(pod.uid)
            if job is not None and (job.start, job.node_list, job.gpus) == (pod.start, pod.node, pod.devices):
                update_end(session, job, pod.end, pod.phase, marks)
                if job.labels != pod.labels:
                    job.labels = pod.labels
                    job.user, job.project = claimed_user(pod.labels), pod.labels.get("project")
                if job.team_id != team_id:
                    job.team_id = team_id
                    marks.add_job(job)
            else:
                new = _new_job(pod, cluster, team_id, node_pool(labels) or node_pool(pod.node_selector), model)
                replace_job(session, job, new, marks)
                added.append((new, pod, units, model))
            result.jobs += 1
    session.flush()  # the new jobs' ids, in batched inserts
    place_jobs(session, [_request(job, pod, units, model) for job, pod, units, model in added])
    if complete:
        result.ended_missing = _end_missing(session, existing.values(), listing, listed_at, marks)
    marks.mark(session)
    session.flush()
    return result


def claimed_user(labels: Mapping[str, str]) -> str:
    """A pod's ``user`` label as a job's user: ``claimed:<value>`` (:data:`CLAIMED_USER_PREFIX`), since whoever
    creates the pod chooses it and nothing verifies it; "" without the label (no user)."""
    value = labels.get("user", "")
    return CLAIMED_USER_PREFIX + value if value else ""


def _units(pod: Pod, model: str | None) -> list[Unit]:
    """The devices to place: whole GPUs, then MIG instances with their shares."""
    units = [Unit()] * pod.gpus
    for profile, count in sorted(pod.mig.items()):
        try:
            share = mig_share(profile, model)
        except ValueError as exc:
            resource = MIG_RESOURCE_PREFIX + profile.replace("+", ".")
            raise PodFieldError(f"spec.containers[].resources.limits.{resource}", str(exc)) from None
        units.extend([Unit(share, profile)] * count)
    return units


def _new_job(pod: Pod, cluster: str, team_id: int, partition: str, model: str | None) -> Job:
    """The new (not yet added) job of ``pod``."""
    profiles = set(pod.mig)
    gpu_type = profiles.pop() if pod.gpus == 0 and len(profiles) == 1 else model
    return Job(
        scheduler="kubernetes",
        cluster=cluster,
        job_id=pod.job_id,
        job_id_raw=pod.uid,
        user=claimed_user(pod.labels),
        account=pod.namespace,
        partition=partition,
        name=pod.name,
        state=pod.phase,
        submit=None,
        start=pod.start,
        end=pod.end,
        gpus=pod.devices,
        gpu_type=None if gpu_type is None else gpu_type[:64],
        node_list=pod.node,
        team_id=team_id,
        namespace=pod.namespace,
        labels=pod.labels,
        project=pod.labels.get("project"),
    )


def _request(job: Job, pod: Pod, units: Sequence[Unit], model: str | None) -> PlacementRequest:
    assert pod.start is not None
    return PlacementRequest(
        job_pk=job.id,
        start=to_epoch(pod.start),
        end=None if pod.end is None else to_epoch(pod.end),
        nodes=[(pod.node, units)],
        gpu_type=model,
        keys=job_keys("kubernetes", job.job_id, job.job_id_raw),
    )


def _known_pods(session: Session, cluster: str, uids: Sequence[str]) -> dict[str, Job]:
    """The cluster's stored pods that are open or in the listing, by UID."""
    pods = select(Job).where(Job.scheduler == "kubernetes", Job.cluster == cluster)
    known = {job.job_id_raw: job for job in session.scalars(pods.where(Job.end.is_(None)))}
    for i in range(0, len(uids), 2000):
        known.update(
            (job.job_id_raw, job) for job in session.scalars(pods.where(Job.job_id_raw.in_(uids[i : i + 2000])))
        )
    return known


def _end_missing(
    session: Session, jobs: Iterable[Job], listing: PodListing, listed_at: datetime, marks: HourMarks
) -> int:
    """End the open pods of a complete listing that it no longer holds, at ``listed_at`` (their hours gathered in
    ``marks``). A pod the listing holds but could not read (an error) is not missing."""
    uids = {p.uid for p in listing.pods}
    names = {p.job_id for p in listing.pods} | {e.pod for e in listing.errors}
    ended = 0
    for job in jobs:
        if job.end is None and job.job_id_raw not in uids and job.job_id not in names:
            update_end(session, job, max(listed_at, job.start or listed_at), "Deleted", marks)
            ended += 1
    return ended
