"""Sends batches of GPU readings to the service: gzip JSON (the columns of :mod:`collector.contract.wire`) over HTTP
with a bearer token.

One POST to ``/api/v1/ingest`` is one :meth:`Shipper.send`; its :class:`SendResult` says whether the service
took the batch (200, or 422: valid readings stored, the named ones rejected), refused this node's credentials (401:
a revoked, expired or unknown token; 403: a token of another node), refused the batch for good (any other 4xx:
retrying cannot help), or failed in a way worth retrying (network error, 5xx, 429, and 408: the body was not read
in time, which RFC 9110 section 15.5.9 allows a client to repeat). Credentials are the operator's to fix, so the
batch is kept for them: with a token file, the shipper re-reads it whenever it changed (checked before every POST),
so a replaced token is used from the next try on without a restart. :class:`Backoff` gives the
wait before a retry: capped exponential backoff with full jitter ("Exponential Backoff And Jitter", AWS
Architecture Blog, 2015), or the server's ``Retry-After`` (RFC 9110 section 10.2.3: seconds or an HTTP-date)
when it sent one. :class:`collector.delivery.Delivery` drives these from the spool; :meth:`Shipper.ship` is the
spool-less path (demo, tests).

An https:// service's certificate is verified against the CA bundle given (``--ca-file``), else the system's trust
store (:func:`tls_context`); a certificate that does not verify is a failure like a network error (retried, the batch
kept), logged as such with OpenSSL's reason.
"""

from __future__ import annotations

import functools
import gzip
import logging
import random
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from collector.contract import wire
from collector.contract.retry_after import parse_retry_after
from collector.contract.sample import Sample

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/ingest"
RETRIED_STATUSES = frozenset({408, 429})
"""4xx answers worth another try: 408 Request Timeout (the service's body deadline on a slow link) and 429 Too Many
Requests (its per-node rate limit, with ``Retry-After``)."""
CREDENTIAL_STATUSES = frozenset({401, 403})
"""Answers refusing this node's credentials, not its readings: 401 (revoked, expired or unknown token) and 403 (a
token of another node)."""
MAX_RETRY_AFTER_SECONDS = 600.0


class ShipError(RuntimeError):
    """A batch could not be delivered within the retry budget, or was refused (4xx other than 422)."""


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one POST.

    Attributes:
        outcome: ``"delivered"`` (200/422: the service stored ``accepted`` readings and rejected ``rejected``),
            ``"unauthorized"`` (401/403: the credentials were refused, the batch is fine), ``"refused"`` (another
            4xx: the batch will never be taken) or ``"failed"`` (network error, 5xx, 408 or 429: worth retrying).
        accepted: readings the service stored (or already had).
        rejected: readings refused: the 422's rejected list, or the whole batch when refused.
        untimely: of ``rejected``, those refused for their time, by reason
            (:data:`collector.contract.wire.UNTIMELY_REASONS`: ``future`` when this node's clock is ahead).
        retry_after: seconds the service asked to wait (``Retry-After``), if it said.
        reason: why it was not delivered, for the log (never contains the token).
    """

    outcome: str
    accepted: int = 0
    rejected: int = 0
    untimely: dict[str, int] = field(default_factory=dict)
    retry_after: float | None = None
    reason: str = ""


def _untimely(rejected: list[dict[str, object]]) -> dict[str, int]:
    """Readings of a 422's ``rejected`` entries refused for their time, by reason (only the reasons with some)."""
    counts: dict[str, int] = {}
    for entry in rejected:
        reason = entry.get("reason")
        if isinstance(reason, str) and reason in wire.UNTIMELY_REASONS:
            readings = entry.get("readings", 1)
            counts[reason] = counts.get(reason, 0) + (readings if isinstance(readings, int) else 1)
    return {reason: count for reason, count in counts.items() if count}


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry number ``attempt`` (1-based): uniform in [0, min(cap, base x 2^(attempt-1))] seconds."""

    base_seconds: float = 0.5
    cap_seconds: float = 60.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """The wait before the next try; the server's ``retry_after`` wins (capped at 10 min) when given."""
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_SECONDS)
        return random.uniform(0, min(self.cap_seconds, self.base_seconds * 2 ** min(attempt - 1, 32)))


def tls_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """The client TLS context an https:// service's certificate is verified with: trusting the PEM CA bundle
    ``ca_file``, else the system's trust store (one context for the process, :func:`_system_trust`). ValueError naming
    ``ca_file`` when it cannot be read or holds no PEM certificate."""
    if ca_file is None:
        return _system_trust()
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except ssl.SSLError as exc:
        raise ValueError(f"{ca_file}: no PEM certificate in it") from exc
    except OSError as exc:
        raise ValueError(f"{ca_file}: {exc.strerror or exc}") from exc


@functools.cache
def _system_trust() -> ssl.SSLContext:
    """The client TLS context trusting the system's store, made once: loading the store takes some 20 ms, which a
    process running a shipper per node (``gpu-finops demo``: 64) would otherwise pay per node. An ``SSLContext`` may
    be shared by connections of several threads."""
    return ssl.create_default_context()


def _transport_failure(exc: httpx.TransportError) -> str:
    """Why a request got no answer, in one line for the log: a certificate that did not verify says so and why
    (OpenSSL's reason: unknown issuer, expired, another host's name), anything else is a network error."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (
                f"TLS certificate verification failed: {cause.verify_message} (the service's certificate must be "
                "signed by a CA of --ca-file, or else of the system's trust store)"
            )
        cause = cause.__cause__ or cause.__context__
    return f"network error: {exc.__class__.__name__}: {exc}"


class Shipper:
    """POSTs batches to ``{service_url}/api/v1/ingest`` for one node.

    Args:
        service_url: base URL of the gpu-finops service, e.g. ``http://127.0.0.1:8080`` or
            ``https://finops.example.org``.
        token: the ingest bearer token (never logged).
        node: this host's name, as Slurm's NodeList spells it.
        token_file: the file ``token`` was read from, if any: re-read (stripped of surrounding white space) before a
            POST whenever its identity, size or modification time changed; while it cannot be read, the last token
            read stays in use (the problem logged once).
        client: an ``httpx.Client`` to use (tests pass one with a MockTransport).
        timeout_seconds: per-request timeout when no client is given.
        ca_file: PEM CA bundle an https:// service's certificate is verified against when no client is given;
            default: the system's trust store. ValueError when it cannot be read (:func:`tls_context`).
    """

    def __init__(
        self,
        service_url: str,
        token: str,
        node: str,
        *,
        client: httpx.Client | None = None,
        timeout_seconds: float = 60.0,
        ca_file: Path | None = None,
        token_file: Path | None = None,
    ) -> None:
        self.url = service_url.rstrip("/") + INGEST_PATH
        self.node = node
        self.token_file = token_file
        self._token = token
        self._token_file_state = self._file_state()
        self._token_file_problem: str | None = None
        self._client = client or httpx.Client(timeout=timeout_seconds, verify=tls_context(ca_file))

    @property
    def credentials(self) -> str:
        """Where the token comes from, for log lines: the token file's path, else the environment variable."""
        return str(self.token_file) if self.token_file is not None else "FINOPS_INGEST_TOKEN"

    def _file_state(self) -> tuple[int, int, int, int] | None:
        """(device, inode, size, mtime ns) of the token file (following a symbolic link, as a Kubernetes Secret's
        is), None when there is none or it cannot be read."""
        if self.token_file is None:
            return None
        try:
            stat = self.token_file.stat()
        except OSError:
            return None
        return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def _current_token(self) -> str:
        """The token to send: the token file's text when it changed since it was last read, else the last token."""
        if self.token_file is None:
            return self._token
        state = self._file_state()
        if state is not None and state == self._token_file_state:
            return self._token
        try:
            token = self.token_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if problem != self._token_file_problem:
                log.error("token file %s cannot be read (%s); sending the token read before", self.token_file,
                          problem)  # fmt: skip
            self._token_file_problem = problem
            return self._token
        if token != self._token:
            log.info("token file %s changed: sending its new token", self.token_file)
        self._token, self._token_file_state, self._token_file_problem = token, state, None
        return token

    def _headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self._current_token()}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }

    def body(self, batch: dict[str, list[dict[str, object]]]) -> bytes:
        """The request body for ``batch`` (:func:`collector.contract.wire.batch_dict` rows): this node's name and the
        readings as columns (:func:`collector.contract.wire.columnar`), JSON, gzip level 1."""
        return gzip.compress(orjson.dumps({"node": self.node, **wire.columnar(batch)}), compresslevel=1)

    def send(self, batch: dict[str, list[dict[str, object]]]) -> SendResult:
        """POST ``batch`` (:func:`collector.contract.wire.batch_dict` form) once, with this node's name."""
        body = self.body(batch)
        count = len(batch["samples"])
        try:
            response = self._client.post(self.url, content=body, headers=self._headers())
        except httpx.TransportError as exc:
            return SendResult("failed", reason=_transport_failure(exc))
        status = response.status_code
        if status in (200, 422):
            result = response.json()
            rejected = result.get("rejected", [])
            count = sum(int(r.get("readings", 1)) for r in rejected)  # a rejected series names its reading count
            if rejected:
                log.warning("service rejected %d readings, e.g. %s", count, rejected[:3])
            untimely = _untimely(rejected)
            if untimely:
                log.error(
                    "service refused %s readings for their time (this node's clock may be off: check NTP/chrony)"
                    ", e.g. %s",
                    untimely,
                    next(r["error"] for r in rejected if r.get("reason") in untimely),
                )
            return SendResult("delivered", accepted=int(result["accepted"]), rejected=count, untimely=untimely)
        reason = f"HTTP {status} {response.text[:200]}"
        if status in CREDENTIAL_STATUSES:
            return SendResult("unauthorized", reason=reason)
        if status >= 500 or status in RETRIED_STATUSES:
            return SendResult(
                "failed", retry_after=parse_retry_after(response.headers.get("Retry-After")), reason=reason
            )
        return SendResult("refused", rejected=count, reason=reason)

    def ship(
        self,
        samples: Sequence[Sample],
        attempts: int = 5,
        backoff: Backoff = Backoff(),  # frozen dataclass: a safe default
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """Send the shippable samples now, retrying failures up to ``attempts`` tries; returns readings accepted.

        Raises ShipError when the service refuses the batch or its credentials, or every try failed.
        """
        return self.deliver(wire.batch_dict(samples), attempts, backoff, sleep)

    def deliver(
        self,
        batch: dict[str, list[dict[str, object]]],
        attempts: int = 5,
        backoff: Backoff = Backoff(),  # frozen dataclass: a safe default
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """Send ``batch`` (:func:`collector.contract.wire.batch_dict` form, its side parts such as ``node_io``
        included) now, as :meth:`ship` does; returns readings accepted (0 for a batch without readings, not sent).

        Raises ShipError when the service refuses the batch or its credentials, or every try failed.
        """
        if not batch["samples"]:
            return 0
        for attempt in range(1, attempts + 1):
            result = self.send(batch)
            if result.outcome == "delivered":
                return result.accepted
            if result.outcome in ("refused", "unauthorized"):
                raise ShipError(f"service refused the batch: {result.reason}")
            if attempt < attempts:
                delay = backoff.delay(attempt, result.retry_after)
                log.warning(
                    "ingest attempt %d/%d failed (%s); retrying in %.1f s", attempt, attempts, result.reason, delay
                )
                sleep(delay)
        raise ShipError(f"batch not delivered after {attempts} attempts ({result.reason})")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()
