"""Kubernetes pods as jobs: read ``kubectl get pods -A -o json`` and store the pods that hold NVIDIA or AMD GPUs.

Input formats (Kubernetes API reference, core/v1): ``kubectl get pods -A -o json`` prints a ``List`` (the API
server's own ``PodList`` is accepted too, and a single ``Pod``) whose ``items`` are Pod objects;
``kubectl get nodes -o json`` the same for Node objects. Fields read from a Pod:

- ``metadata``: ``namespace``, ``name``, ``uid``, ``labels``.
- ``spec.nodeName``; ``spec.nodeSelector`` (node pool, when the node's labels are not known).
- ``spec.containers[]``, ``spec.initContainers[]``: ``resources.limits`` / ``resources.requests`` of
  ``nvidia.com/gpu`` and ``amd.com/gpu`` (whole GPUs; AMD's device plugin counts an MI250X's GCDs and, in CPX, QPX or
  DPX mode, an MI300X's compute partitions as GPUs, each priced as its share of the package by the GPU's model,
  :mod:`finops.pricing.package_share`) and ``nvidia.com/mig-<profile>`` (MIG instances, the NVIDIA device plugin's
  mixed strategy, which writes a profile's ``+`` as ``.``: ``nvidia.com/mig-1g.10gb.me``); ``restartPolicy``
  (``Always`` marks a sidecar). Extended resources are whole numbers with requests equal to limits; the limit
  is taken, else the request.
- ``status.phase`` (Pending, Running, Succeeded, Failed, Unknown), ``status.startTime`` (RFC 3339; when the
  kubelet acknowledged the pod, before image pulls: device plugins allocate at admission),
  ``status.containerStatuses[]`` and ``status.initContainerStatuses[]``: ``state.running.startedAt``,
  ``state.terminated.startedAt`` and ``finishedAt``.

A pod's device count per resource follows Kubernetes' effective request ("Effective Pod requests and
limits"): the larger of (sum over app containers + sum over sidecars) and the effective init request, the
largest over init containers of (its own request + the sidecars listed before it; a sidecar counts itself).

Storing the pods as jobs is :mod:`finops.jobs.kubernetes_import`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from collector.contract.bounds import JOB_ID_MAX_LENGTH
from finops.errors import FinopsError

GPU_RESOURCE = "nvidia.com/gpu"
AMD_GPU_RESOURCE = "amd.com/gpu"
"""AMD's Kubernetes device plugin's resource (ROCm/k8s-device-plugin): a GPU, an MI250X GCD or an MI300X partition."""
GPU_RESOURCES = (GPU_RESOURCE, AMD_GPU_RESOURCE)
AMD_PRODUCT_LABEL = "amd.com/gpu.product-name"
"""Node label AMD's node labeller (ROCm/k8s-device-plugin) sets to the product name with ``_`` for spaces
(``AMD_Instinct_MI300X_OAM``)."""
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""Node label NVIDIA GPU feature discovery sets to the GPU's product name with ``-`` for spaces."""

NODE_POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
)
"""Node labels naming a node pool (GKE, EKS managed node groups, Karpenter, AKS), first present wins."""


LABEL_VALUE_MAX_LENGTH = 63
"""Longest Kubernetes label value (API conventions, "Syntax and character set"); the ``user`` and ``project``
labels stored on a job are held to it."""

_COUNT_RE = re.compile(r"[0-9]+")
_MIG_SUFFIX_RE = re.compile(r"([0-9]+g\.[0-9]+gb)\.(.+)")
_TERMINAL = ("Succeeded", "Failed")


class KubernetesFormatError(FinopsError, ValueError):
    """A whole document is unusable (not JSON, not a Pod/Node list); the message names the source."""


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod that holds NVIDIA or AMD GPUs, read from a Pod object.

    ``gpus``: whole GPUs (effective ``nvidia.com/gpu`` plus ``amd.com/gpu``); ``mig``: MIG profile (``1g.10gb``,
    ``1g.10gb+me``) -> instances. ``start``/``end``: aware UTC, ``end`` None while it runs; ``start`` None for a pod
    that never ran (not bound, or terminal without any container having started).
    """

    namespace: str
    name: str
    uid: str
    node: str
    labels: dict[str, str]
    node_selector: dict[str, str]
    phase: str
    start: datetime | None
    end: datetime | None
    gpus: int
    mig: dict[str, int]

    @property
    def job_id(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def devices(self) -> int:
        """Whole GPUs plus MIG instances."""
        return self.gpus + sum(self.mig.values())


@dataclass(frozen=True, slots=True)
class PodError:
    """A pod (``namespace/name``, or ``items[i]`` without a readable name) that could not be used.

    ``field`` is the JSON path of the bad field (``spec.containers[0].resources.limits.nvidia.com/gpu``);
    ``message`` reads ``<source>: pod <pod>: field <field>: <what is wrong>``.
    """

    pod: str
    field: str
    message: str


@dataclass(frozen=True, slots=True)
class PodListing:
    """What :func:`parse_pods` read: GPU pods in input order, how many pods request no GPU, and errors."""

    pods: list[Pod]
    without_gpus: int
    errors: list[PodError]


class PodFieldError(ValueError):
    """A pod field that cannot be read: ``path`` names it (``spec.containers[0].resources.limits.nvidia.com/gpu``),
    the message says what was expected."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def load_document(text: str | bytes, *, source: str) -> Any:
    """Parse JSON text. Raises :class:`KubernetesFormatError` naming ``source`` and the position."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise KubernetesFormatError(f"{source}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}") from None


def _items(document: Any, kind: str, source: str) -> list[Any]:
    """The objects of a ``List``/``<kind>List`` (or a single ``<kind>``)."""
    if not isinstance(document, dict):
        raise KubernetesFormatError(f"{source}: expected a JSON object ({kind}List or List), found {_type(document)}")
    found = document.get("kind")
    if found == kind:
        return [document]
    if found not in (f"{kind}List", "List") or not isinstance(document.get("items"), list):
        raise KubernetesFormatError(f"{source}: expected a {kind}List or List with items, found kind {found!r}")
    return list(document["items"])


def parse_pods(document: Any, *, source: str) -> PodListing:
    """The GPU pods of a Pod list (already parsed JSON, see :func:`load_document`).

    A pod with a bad field is reported in ``errors`` and the others are read. Raises
    :class:`KubernetesFormatError` when the document is not a Pod list.
    """
    pods: list[Pod] = []
    errors: list[PodError] = []
    without_gpus = 0
    for index, item in enumerate(_items(document, "Pod", source)):
        label = f"items[{index}]"
        try:
            if not isinstance(item, dict):
                raise PodFieldError(label, f"expected a Pod object, found {_type(item)}")
            if item.get("kind", "Pod") != "Pod":
                raise PodFieldError("kind", f"expected Pod, found {item.get('kind')!r}")
            label = _pod_label(item, label)
            pod = _read_pod(item)
        except PodFieldError as exc:
            errors.append(PodError(label, exc.path, f"{source}: pod {label}: field {exc.path}: {exc}"))
            continue
        if pod is None:
            without_gpus += 1
        else:
            pods.append(pod)
    return PodListing(pods, without_gpus, errors)


def parse_nodes(document: Any, *, source: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Node name -> labels of the nodes in a Node list that have NVIDIA GPUs (a GPU or MIG resource in
    ``status.capacity``, or the ``nvidia.com/gpu.present`` label), and messages for unreadable nodes."""
    nodes: dict[str, dict[str, str]] = {}
    errors: list[str] = []
    for index, item in enumerate(_items(document, "Node", source)):
        try:
            if not isinstance(item, dict):
                raise PodFieldError(f"items[{index}]", f"expected a Node object, found {_type(item)}")
            meta = _object(item, "metadata", "metadata")
            name = _string(meta, "name", "metadata.name")
            labels = _labels(meta, "metadata.labels")
            capacity = _object(_object(item, "status", "status", optional=True), "capacity", "status.capacity", True)
        except PodFieldError as exc:
            errors.append(f"{source}: node items[{index}]: field {exc.path}: {exc}")
            continue
        has_gpus = labels.get("nvidia.com/gpu.present") == "true" or any(
            key in GPU_RESOURCES or key.startswith(MIG_RESOURCE_PREFIX) for key in capacity
        )
        if has_gpus:
            nodes[name] = labels
    return nodes, errors


def _read_pod(item: dict[str, Any]) -> Pod | None:
    """The pod, or None when it requests no GPU. Raises PodFieldError."""
    meta = _object(item, "metadata", "metadata")
    namespace = _string(meta, "namespace", "metadata.namespace")
    name = _string(meta, "name", "metadata.name")
    uid = _string(meta, "uid", "metadata.uid")
    labels = _labels(meta, "metadata.labels")
    spec = _object(item, "spec", "spec")
    status = _object(item, "status", "status", optional=True)
    counts = _device_counts(spec)
    gpus = sum(counts.pop(resource, 0) for resource in GPU_RESOURCES)
    mig = {_profile(resource): count for resource, count in counts.items() if count}
    if gpus == 0 and not mig:
        return None
    if len(f"{namespace}/{name}") > JOB_ID_MAX_LENGTH:
        raise PodFieldError(
            "metadata.name", f"namespace/name is longer than the {JOB_ID_MAX_LENGTH} characters job ids hold"
        )
    for stored in ("user", "project"):
        if len(labels.get(stored, "")) > LABEL_VALUE_MAX_LENGTH:
            raise PodFieldError(
                f"metadata.labels.{stored}", f"longer than the {LABEL_VALUE_MAX_LENGTH} characters of a label value"
            )
    node = spec.get("nodeName") or ""
    if not isinstance(node, str):
        raise PodFieldError("spec.nodeName", f"expected a string, found {_type(node)}")
    selector = _labels(spec, "spec.nodeSelector", key="nodeSelector")
    phase = status.get("phase", "Pending")
    if not isinstance(phase, str):
        raise PodFieldError("status.phase", f"expected a string, found {_type(phase)}")
    started, finished = _container_times(status)
    start_time = _time(status.get("startTime"), "status.startTime")
    start = start_time or (min(started) if started else None)
    end = None
    if phase in _TERMINAL:
        if not started and not finished:
            start = None  # never ran a container (e.g. rejected at admission): held no GPU
        elif not finished:
            raise PodFieldError(
                "status.containerStatuses[].state.terminated.finishedAt",
                f"a {phase} pod whose containers ran has no container finish time",
            )
        else:
            end = max(finished)
            if start is not None and end < start:
                raise PodFieldError("status.containerStatuses[].state.terminated.finishedAt", "before the pod's start")
    if not node:
        start = None
    return Pod(namespace, name, uid, node, labels, selector, phase, start, end, gpus, mig)


def _device_counts(spec: dict[str, Any]) -> dict[str, int]:
    """Effective device count per NVIDIA resource name (init-container rule, sidecars included)."""
    containers = _list(spec, "containers", "spec.containers")
    init_containers = _list(spec, "initContainers", "spec.initContainers", optional=True)
    app: dict[str, int] = {}
    for i, container in enumerate(containers):
        for resource, count in _container_devices(container, f"spec.containers[{i}]").items():
            app[resource] = app.get(resource, 0) + count
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(init_containers):
        path = f"spec.initContainers[{i}]"
        devices = _container_devices(container, path)
        if container.get("restartPolicy") == "Always":
            for resource, count in devices.items():
                sidecars[resource] = sidecars.get(resource, 0) + count
            current = dict(sidecars)
        else:
            current = {r: devices.get(r, 0) + sidecars.get(r, 0) for r in set(devices) | set(sidecars)}
        for resource, count in current.items():
            init_peak[resource] = max(init_peak.get(resource, 0), count)
    resources = set(app) | set(sidecars) | set(init_peak)
    return {r: max(app.get(r, 0) + sidecars.get(r, 0), init_peak.get(r, 0)) for r in sorted(resources)}


def _container_devices(container: Any, path: str) -> dict[str, int]:
    """NVIDIA device counts of one container: its limit, else its request (they must agree when both set)."""
    if not isinstance(container, dict):
        raise PodFieldError(path, f"expected a container object, found {_type(container)}")
    resources = _object(container, "resources", f"{path}.resources", optional=True)
    limits = _object(resources, "limits", f"{path}.resources.limits", optional=True)
    requests = _object(resources, "requests", f"{path}.resources.requests", optional=True)
    devices: dict[str, int] = {}
    for resource in set(limits) | set(requests):
        if resource not in GPU_RESOURCES and not resource.startswith(MIG_RESOURCE_PREFIX):
            continue
        limit = _count(limits, resource, f"{path}.resources.limits.{resource}")
        request = _count(requests, resource, f"{path}.resources.requests.{resource}")
        if limit is not None and request is not None and limit != request:
            raise PodFieldError(
                f"{path}.resources.requests.{resource}",
                f"request {request} differs from limit {limit}; extended resources need them equal",
            )
        devices[resource] = limit if limit is not None else request or 0
    return devices


def _count(values: dict[str, Any], resource: str, path: str) -> int | None:
    """A device quantity: a whole number, as a JSON string (how the API writes quantities) or integer."""
    if resource not in values:
        return None
    value = values[resource]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _COUNT_RE.fullmatch(value):
        return int(value)
    raise PodFieldError(path, f"{value!r} is not a whole number of devices")


def _profile(resource: str) -> str:
    """``nvidia.com/mig-1g.10gb.me`` -> ``1g.10gb+me`` (the device plugin writes ``+`` as ``.``)."""
    profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
    match = _MIG_SUFFIX_RE.fullmatch(profile)
    return f"{match.group(1)}+{match.group(2)}" if match else profile


def _container_times(status: dict[str, Any]) -> tuple[list[datetime], list[datetime]]:
    """Container start and finish instants of all init and app containers."""
    started: list[datetime] = []
    finished: list[datetime] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for i, entry in enumerate(_list(status, key, f"status.{key}", optional=True)):
            path = f"status.{key}[{i}]"
            if not isinstance(entry, dict):
                raise PodFieldError(path, f"expected a container status object, found {_type(entry)}")
            for source in ("lastState", "state"):
                state = _object(entry, source, f"{path}.{source}", optional=True)
                running = _object(state, "running", f"{path}.{source}.running", optional=True)
                terminated = _object(state, "terminated", f"{path}.{source}.terminated", optional=True)
                for found, at in (
                    (started, _time(running.get("startedAt"), f"{path}.{source}.running.startedAt")),
                    (started, _time(terminated.get("startedAt"), f"{path}.{source}.terminated.startedAt")),
                    (finished, _time(terminated.get("finishedAt"), f"{path}.{source}.terminated.finishedAt")),
                ):
                    if at is not None:
                        found.append(at)
    return started, finished


def _time(value: Any, path: str) -> datetime | None:
    """An RFC 3339 time (``2026-01-05T10:00:00Z``) as aware UTC; None for absent or null."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise PodFieldError(path, f"expected an RFC 3339 time string, found {_type(value)}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise PodFieldError(path, f"{value!r} is not an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise PodFieldError(path, f"{value!r} has no UTC offset")
    return parsed.astimezone(UTC)


def _object(parent: dict[str, Any], key: str, path: str, optional: bool = False) -> dict[str, Any]:
    value = parent.get(key)
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise PodFieldError(path, f"expected an object, found {_type(value)}")
    return value


def _list(parent: dict[str, Any], key: str, path: str, optional: bool = False) -> list[Any]:
    value = parent.get(key)
    if value is None and optional:
        return []
    if not isinstance(value, list):
        raise PodFieldError(path, f"expected a list, found {_type(value)}")
    return value


def _string(parent: dict[str, Any], key: str, path: str) -> str:
    value = parent.get(key)
    if not isinstance(value, str) or not value:
        raise PodFieldError(path, f"expected a non-empty string, found {_type(value)}")
    return value


def _labels(parent: dict[str, Any], path: str, key: str = "labels") -> dict[str, str]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise PodFieldError(path, "expected an object of string values")
    return dict(value)


def _pod_label(item: dict[str, Any], fallback: str) -> str:
    meta = item.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("namespace"), str) and isinstance(meta.get("name"), str):
        return f"{meta['namespace']}/{meta['name']}"
    return fallback


def _type(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def node_pool(labels: Mapping[str, str]) -> str:
    """The node pool a node's (or a pod's node selector's) labels name, else ""."""
    return next((labels[key] for key in NODE_POOL_LABELS if labels.get(key)), "")


def product_model(labels: Mapping[str, str]) -> str | None:
    """The GPU model from GPU feature discovery's product label, in NVML's spelling where it can be recovered:
    ``NVIDIA-H100-80GB-HBM3`` -> ``NVIDIA H100 80GB HBM3`` (the single-strategy ``-MIG-<profile>`` suffix
    dropped), else from AMD's node labeller's (``AMD_Instinct_MI300X_OAM`` -> ``AMD Instinct MI300X OAM``); None
    without either label."""
    product = labels.get(GPU_PRODUCT_LABEL)
    if not product:
        amd = labels.get(AMD_PRODUCT_LABEL)
        return amd.replace("_", " ") if amd else None
    return re.sub(r"-MIG-.*$", "", product).replace("-", " ")
