"""The Prometheus HTTP API as the service reads it: range and instant queries (``POST /api/v1/query_range`` and
``/api/v1/query``, the parameters as a form body; the JSON envelope, the ``matrix`` and ``vector`` result formats
and the error answers are those of the Prometheus documentation, "HTTP API": answers are parsed by orjson, a series
or sample written as that documentation writes it is taken as is, anything else is judged by pydantic models), the
site's label names for dcgm-exporter's labels, Prometheus durations and PromQL quoting. What is pulled through it:
:mod:`finops.ingest.prometheus_pull` (GPU telemetry), :mod:`finops.analysis.telemetry` (fabric throughput),
:mod:`finops.analysis.tokens` (generated tokens).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote_plus

import httpx
import orjson
from pydantic import BaseModel, ValidationError

from finops.errors import FinopsError
from finops.ingest.amd_exporter import canonical_labels

log = logging.getLogger(__name__)

MAX_POINTS_PER_SERIES = 11_000
"""Prometheus refuses a range query whose (end − start) ÷ step exceeds this ("exceeded maximum resolution")."""


_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class PrometheusError(FinopsError, RuntimeError):
    """Prometheus did not answer a query with data: an error answer (``"status": "error"`` with its ``errorType``
    and ``error``), an HTTP error, a timeout or no connection. The message names the query and its range."""


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a range query: its labels (``__name__`` included) and (epoch seconds, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class InstantSample:
    """One element of an instant query's vector: labels, evaluation time (epoch seconds) and value."""

    labels: dict[str, str]
    ts: float
    value: float


class _Envelope(BaseModel):
    status: Literal["success", "error"]
    data: Any = None
    errorType: str = ""  # the API's spelling
    error: str = ""
    warnings: list[str] = []


class _Matrix(BaseModel):
    resultType: Literal["matrix"]
    result: list[Any]


class _Vector(BaseModel):
    resultType: Literal["vector"]
    result: list[Any]


class _MatrixSeries(BaseModel):
    metric: dict[str, str]
    values: list[tuple[float, str]]


class _VectorSample(BaseModel):
    metric: dict[str, str]
    value: tuple[float, str]


class PrometheusClient:
    """The two query endpoints of a Prometheus server's HTTP API (``/api/v1/query_range``, ``/api/v1/query``), asked by
    POST (:func:`form_body`).

    Args:
        url: the server's base URL (``http://prometheus:9090``; a path prefix such as ``/prometheus`` is kept).
        client: the ``httpx.Client`` (tests inject a MockTransport); default one with ``timeout_seconds``.

    A series that is not a JSON object of string labels and ``[time, "number"]`` points, or whose value is not a
    finite number, is logged (naming the series) and left out; the other series are returned.
    """

    def __init__(self, url: str, client: httpx.Client | None = None, timeout_seconds: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self._client = client or httpx.Client(timeout=timeout_seconds)

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def query_range(
        self, query: str, start: datetime, end: datetime, step_seconds: float, exact: bool = False
    ) -> list[RangeSeries]:
        """``query`` evaluated at ``start, start + step, …`` up to ``end`` inclusive (the API's ``matrix``).
        ``exact``: also ask ``nocache=1``, without which VictoriaMetrics may move the instants of an answer of more
        than 50 points to multiples of the step, for its cache (VictoriaMetrics issue 563); other servers ignore it,
        and a query frontend may still align them (Thanos' ``--query-range.align-range-with-step``)."""
        where = f"{query} over [{start.isoformat()}, {end.isoformat()}] step {step_seconds:g}s"
        params = {"query": query, "start": _api_time(start), "end": _api_time(end), "step": f"{step_seconds:g}"}
        if exact:
            params["nocache"] = "1"
        return self._series(self._result(_Matrix, self._call("/api/v1/query_range", params, where), where), where)

    def samples(self, query: str, at: datetime) -> list[RangeSeries]:
        """The raw samples of a range-vector selector (``metric{…}[5m]``) at the instant ``at``: an instant query
        whose result is a ``matrix`` (Prometheus documentation, "HTTP API", "Range vectors"), each series' samples at
        their own timestamps (epoch seconds), in time order."""
        where = f"{query} at {at.isoformat()}"
        params = {"query": query, "time": _api_time(at)}
        return self._series(self._result(_Matrix, self._call("/api/v1/query", params, where), where), where)

    @staticmethod
    def _series(matrix: _Matrix | _Vector, where: str) -> list[RangeSeries]:
        """The series of a ``matrix`` result; a malformed one, or one with a value that is no number, is logged and
        left out."""
        found = []
        for raw in matrix.result:
            plain = _plain_series(raw)
            if plain is not None:
                found.append(plain)
                continue
            try:
                series = _MatrixSeries.model_validate(raw)
            except ValidationError as exc:
                log.warning("%s: malformed series %s skipped: %s", where, _describe_raw(raw), validation_message(exc))
                continue
            points: list[tuple[float, float]] = []
            for ts, text in series.values:
                value = _number(text)
                if value is None:
                    log.warning("%s: series %s skipped: value %r is not a number", where, describe(series.metric), text)
                    break
                points.append((ts, value))
            else:
                found.append(RangeSeries(series.metric, points))
        return found

    def query(self, query: str, at: datetime) -> list[InstantSample]:
        """``query`` evaluated at the instant ``at`` (the API's ``vector``)."""
        where = f"{query} at {at.isoformat()}"
        vector = self._result(
            _Vector, self._call("/api/v1/query", {"query": query, "time": _api_time(at)}, where), where
        )
        found = []
        for raw in vector.result:
            plain = _plain_sample(raw)
            if plain is not None:
                found.append(plain)
                continue
            try:
                sample = _VectorSample.model_validate(raw)
            except ValidationError as exc:
                log.warning("%s: malformed sample %s skipped: %s", where, _describe_raw(raw), validation_message(exc))
                continue
            value = _number(sample.value[1])
            if value is None:
                log.warning(
                    "%s: sample %s skipped: value %r is not a number", where, describe(sample.metric), sample.value[1]
                )
                continue
            found.append(InstantSample(sample.metric, sample.value[0], value))
        return found

    def _call(self, path: str, params: dict[str, str], where: str) -> Any:
        try:
            response = self._client.post(self.url + path, content=form_body(params), headers=_FORM_HEADERS)
        except httpx.TimeoutException as exc:
            raise PrometheusError(f"{where}: {self.url} did not answer in time ({exc.__class__.__name__})") from exc
        except httpx.TransportError as exc:
            raise PrometheusError(f"{where}: {self.url}: {exc.__class__.__name__}: {exc}") from exc
        try:
            envelope = _Envelope.model_validate(orjson.loads(response.content))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise PrometheusError(
                f"{where}: HTTP {response.status_code} from {self.url}, not a Prometheus API answer: "
                f"{response.text[:200]!r}"
            ) from exc
        if envelope.status == "error" or response.is_error:
            kind, message = envelope.errorType or "error", envelope.error or "(no message)"
            raise PrometheusError(f"{where}: HTTP {response.status_code} {kind}: {message}")
        for warning in envelope.warnings:
            log.warning("%s: Prometheus warns: %s", where, warning)
        return envelope.data

    @staticmethod
    def _result(model: type[_Matrix] | type[_Vector], data: Any, where: str) -> _Matrix | _Vector:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise PrometheusError(f"{where}: unexpected result: {validation_message(exc)}") from exc


@dataclass(frozen=True, slots=True)
class LabelNames:
    """The site's label names for what dcgm-exporter calls ``Hostname``, ``gpu``, ``UUID``, ``modelName``,
    ``hpc_job``, ``namespace``, ``pod``, ``GPU_I_PROFILE`` and ``GPU_I_ID``, for what AMD's Device Metrics Exporter
    calls ``hostname``, ``gpu_id``, ``gpu_uuid``, ``card_series``, ``job_id``, ``gpu_partition_id``,
    ``gpu_compute_partition_type`` and ``serial_number`` (:mod:`finops.ingest.amd_exporter`), and Prometheus'
    ``instance``."""

    hostname: str = "Hostname"
    instance: str = "instance"
    gpu: str = "gpu"
    uuid: str = "UUID"
    model: str = "modelName"
    hpc_job: str = "hpc_job"
    namespace: str = "namespace"
    pod: str = "pod"
    mig_profile: str = "GPU_I_PROFILE"
    mig_instance: str = "GPU_I_ID"
    amd_hostname: str = "hostname"
    amd_gpu: str = "gpu_id"
    amd_uuid: str = "gpu_uuid"
    amd_model: str = "card_series"
    amd_job: str = "job_id"
    amd_partition: str = "gpu_partition_id"
    amd_partition_type: str = "gpu_compute_partition_type"
    amd_serial: str = "serial_number"

    @classmethod
    def parse(cls, assignments: list[str]) -> LabelNames:
        """From ``KEY=NAME`` texts (``hostname=node``); a bad one raises ValueError naming it and the keys."""
        keys = [f.name for f in dataclass_fields(cls)]
        chosen: dict[str, str] = {}
        for text in assignments:
            key, sep, name = text.partition("=")
            if not sep or key not in keys or not name:
                raise ValueError(f"{text!r}: expected KEY=NAME with KEY one of {', '.join(keys)}")
            chosen[key] = name
        return cls(**chosen)

    def is_amd(self, labels: Mapping[str, str]) -> bool:
        """Whether a series is AMD Device Metrics Exporter's: it has AMD's GPU index label and not dcgm-exporter's."""
        return self.amd_gpu in labels and self.gpu not in labels

    def uuid_label(self, amd: bool) -> str:
        """The UUID label of AMD's exporter (``amd``) or of dcgm-exporter."""
        return self.amd_uuid if amd else self.uuid

    def canonical(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The labels of a GPU series of either exporter under dcgm-exporter's names (only those the series has;
        an AMD series' also ``partition``, ``partition_type`` and ``serial``,
        :func:`finops.ingest.amd_exporter.canonical_labels`)."""
        if self.is_amd(labels):
            amd = {
                "gpu": self.amd_gpu, "UUID": self.amd_uuid, "modelName": self.amd_model, "hpc_job": self.amd_job,
                "namespace": self.namespace, "pod": self.pod, "partition": self.amd_partition,
                "partition_type": self.amd_partition_type, "serial": self.amd_serial,
            }  # fmt: skip
            return canonical_labels(labels, amd)
        names = {
            "gpu": self.gpu, "UUID": self.uuid, "modelName": self.model, "hpc_job": self.hpc_job,
            "namespace": self.namespace, "pod": self.pod, "GPU_I_PROFILE": self.mig_profile,
            "GPU_I_ID": self.mig_instance,
        }  # fmt: skip
        return {canonical: labels[site] for canonical, site in names.items() if site in labels}

    def node(self, labels: Mapping[str, str]) -> str:
        """The series' node: its hostname label (dcgm-exporter's, else AMD's), else the host part of ``instance``
        (port removed); '' if none."""
        for name in (self.hostname, self.amd_hostname):
            if labels.get(name):
                return labels[name]
        instance = labels.get(self.instance, "")
        host, _, port = instance.rpartition(":")
        if host and port.isdigit():
            instance = host
        return instance.removeprefix("[").removesuffix("]")


def parse_step(text: str) -> int:
    """A Prometheus duration (``60s``, ``1m``, ``1h30m``) or a number of seconds, as whole seconds ≥ 1.

    Raises ValueError naming the text when it is neither or is not a whole number of seconds.
    """
    stripped = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", stripped):
        seconds = float(stripped)
    elif stripped and _DURATION.sub("", stripped) == "":
        seconds = sum(int(n) * _DURATION_SECONDS[unit] for n, unit in _DURATION.findall(stripped))
    else:
        raise ValueError(f"step {text!r} is not a duration such as 60s, 1m or 90")
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(f"step {text!r} is not a whole number of seconds ≥ 1")
    return int(seconds)


def describe(labels: Mapping[str, str]) -> str:
    """A series as PromQL writes it: ``name{label="value", …}`` (labels sorted)."""
    rest = ",".join(f"{key}={promql_string(value)}" for key, value in sorted(labels.items()) if key != "__name__")
    return f"{labels.get('__name__', '')}{{{rest}}}"


def selector_matchers(selector: str) -> str:
    """The matchers inside a selector's braces (``{cluster="a"}`` → ``cluster="a"``); ValueError if not braced."""
    text = selector.strip()
    if not text:
        return ""
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f'selector {selector!r}: expected label matchers in braces, such as {{cluster="a"}}')
    return text[1:-1].strip().rstrip(",")


def promql_string(value: str) -> str:
    """A PromQL double-quoted string."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


_FORM_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
_FORM_ESCAPES = {byte: "+" if byte == 0x20 else f"%{byte:02X}" for byte in range(128) if byte not in _FORM_SAFE}
_FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}


def form_body(params: Mapping[str, str]) -> bytes:
    """``params`` as an ``application/x-www-form-urlencoded`` body, byte for byte as :func:`urllib.parse.urlencode`
    writes it (unreserved characters as they are, a space as ``+``, every other byte of the UTF-8 text as ``%XX``),
    by one ``str.translate`` of ASCII text: a fleet's queries are long, and percent-encoding them a character at a
    time cost a quarter of the client's CPU in a cycle. The Prometheus HTTP API takes a query's parameters so in a
    POST, "useful when specifying a large query that may breach server-side URL character limits" (Prometheus
    documentation, "HTTP API"); VictoriaMetrics, Thanos and Mimir too."""
    return "&".join(
        f"{key}={value.translate(_FORM_ESCAPES) if value.isascii() else quote_plus(value)}"
        for key, value in params.items()
    ).encode()


def _plain_labels(metric: Any) -> bool:
    """Whether ``metric`` is a JSON object of string labels."""
    return type(metric) is dict and set(map(type, metric.values())) <= {str}


def _plain_series(raw: Any) -> RangeSeries | None:
    """A ``matrix`` series as the API documentation writes it (an object of string labels and ``[<number>,
    "<finite number>"]`` points) as a :class:`RangeSeries`; None for anything else, which the pydantic models then
    judge (and log). Checked by type alone: a loop of the fleet's raw samples stays cheap."""
    if type(raw) is not dict or not _plain_labels(raw.get("metric")) or type(values := raw.get("values")) is not list:
        return None
    try:
        times = [float(ts) for ts, _ in values if type(ts) in _TIMES]
        numbers = [float(text) for _, text in values if type(text) is str]
    except (TypeError, ValueError):
        return None
    if len(times) != len(values) or len(numbers) != len(values):
        return None
    if not math.isfinite(sum(numbers)) and not all(map(math.isfinite, numbers)):  # a sum overflows, or not finite
        return None
    return RangeSeries(raw["metric"], list(zip(times, numbers, strict=True)))


def _plain_sample(raw: Any) -> InstantSample | None:
    """A ``vector`` sample as the API documentation writes it (labels as for :func:`_plain_series`, one point) as
    an :class:`InstantSample`; None for anything else."""
    if type(raw) is not dict or not _plain_labels(raw.get("metric")) or type(pair := raw.get("value")) is not list:
        return None
    if len(pair) != 2 or type(pair[0]) not in _TIMES or type(pair[1]) is not str:
        return None
    value = _number(pair[1])
    return None if value is None else InstantSample(raw["metric"], float(pair[0]), value)


_TIMES = (int, float)
"""The JSON types of a point's time taken as is (pydantic's float also takes text and booleans)."""


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _api_time(at: datetime) -> str:
    if at.tzinfo is None:
        raise ValueError(f"naive datetime {at.isoformat()}: times must be timezone-aware")
    return f"{at.timestamp():.3f}"


def _describe_raw(raw: Any) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("metric"), dict):
        return describe({str(k): str(v) for k, v in raw["metric"].items()})
    return repr(raw)[:200]


def validation_message(exc: ValidationError) -> str:
    """The first error of a pydantic ValidationError as ``<dotted location>: <message>`` (``(top)`` for none)."""
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc'])) or '(top)'}: {error['msg']}"
