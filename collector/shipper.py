"""Ships GPU readings to the service: gzip JSON over HTTP with a bearer token, retried with backoff.

Network errors and 5xx are retried with capped exponential backoff (a durable spool comes with the
collector issue; until then a batch that exhausts its retries is logged and dropped). A 422 means the
service stored the valid readings and rejected the named ones: it is logged, not retried.
"""

from __future__ import annotations

import gzip
import logging
import random
import time
from collections.abc import Callable, Sequence

import httpx
import orjson

from collector import wire
from collector.sample import Sample

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/ingest"


class ShipError(RuntimeError):
    """A batch could not be delivered within the retry budget, or was refused (4xx other than 422)."""


class Shipper:
    """POSTs batches to ``{service_url}/api/v1/ingest``.

    Args:
        service_url: base URL of the gpu-finops service, e.g. ``http://127.0.0.1:8080``.
        token: the ingest bearer token (never logged).
        node: this host's name, as Slurm's NodeList spells it.
        attempts: tries per batch; backoff doubles from ``backoff_seconds`` up to ``max_backoff_seconds``
            with full jitter.
        client: an ``httpx.Client`` to use (tests pass one with a MockTransport).
    """

    def __init__(
        self,
        service_url: str,
        token: str,
        node: str,
        *,
        attempts: int = 5,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = service_url.rstrip("/") + INGEST_PATH
        self.node = node
        self.attempts = attempts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }
        self._client = client or httpx.Client(timeout=60)
        self._sleep = sleep

    def ship(self, samples: Sequence[Sample]) -> int:
        """Send the GPU samples among ``samples``; returns how many the service accepted.

        Raises ShipError when retries are exhausted or the service refuses the batch.
        """
        gpu_samples = [s for s in samples if s.entity == "gpu"]
        if not gpu_samples:
            return 0
        inventory = {s.labels["uuid"]: wire.gpu_info_dict(s) for s in gpu_samples}
        body = {
            "node": self.node,
            "gpus": list(inventory.values()),
            "samples": [wire.reading_dict(s) for s in gpu_samples],
        }
        return self.post(gzip.compress(orjson.dumps(body), compresslevel=1))

    def post(self, payload: bytes) -> int:
        """POST one gzip-compressed JSON batch with retries; returns the service's ``accepted`` count."""
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._client.post(self.url, content=payload, headers=self._headers)
            except httpx.TransportError as exc:
                reason = f"network error: {exc.__class__.__name__}"
            else:
                if response.status_code in (200, 422):
                    result = response.json()
                    if response.status_code == 422:
                        log.warning("service rejected %d readings: %s", len(result["rejected"]), result["rejected"][:3])
                    return int(result["accepted"])
                if response.status_code < 500:
                    raise ShipError(f"service refused the batch: HTTP {response.status_code} {response.text[:200]}")
                reason = f"HTTP {response.status_code}"
            if attempt < self.attempts:
                delay = random.uniform(0, min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempt - 1)))
                log.warning(
                    "ingest attempt %d/%d failed (%s); retrying in %.1f s", attempt, self.attempts, reason, delay
                )
                self._sleep(delay)
        raise ShipError(f"batch not delivered after {self.attempts} attempts ({reason})")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()
