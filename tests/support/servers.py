"""Running the service on a real socket inside a test: uvicorn in a background thread on 127.0.0.1, or
``gpu-finops serve`` and ``gpu-finops scheduler`` as child processes."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running(app: FastAPI, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (on ``port``, default one the kernel picks, held from the start so no other test
    can take it between choosing and binding) until the block ends; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port or 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            sock.close()
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


API_TOKEN = "test-admin-api-token"
"""The ``FINOPS_API_TOKEN`` (an admin credential) of test services whose ``/metrics`` a test reads."""


def service_metrics(base: str, timeout: float = 5.0) -> str:
    """The service's ``/metrics`` text at ``base``, read with :data:`API_TOKEN`; raises unless it answers 200."""
    response = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=timeout)
    response.raise_for_status()
    return response.text


def _wait_healthy(url: str, process: subprocess.Popen[bytes], tls: ssl.SSLContext | None = None) -> None:
    """Return once ``url``/healthz answers 200; raise when ``process`` ends or 30 s pass first."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", verify=tls or True).status_code == 200:
                return
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise
            time.sleep(0.1)


@contextmanager
def scheduler_process(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``gpu-finops --verbose scheduler`` as a child process with ``env``, its /metrics on a free port of 127.0.0.1
    and its output (DEBUG and up) in the file ``log``, until the block ends (unless it ended before); yields the
    process once its ``/healthz`` answers 200 (within 30 s), by when its jobs are scheduled."""
    port = free_port()
    command = [sys.executable, "-m", "finops.cli", "--verbose", "scheduler", "--metrics-port", str(port)]
    with log.open("wb") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", process)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=30)


@contextmanager
def serve_process(env: dict[str, str], *options: str, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """``gpu-finops serve --no-scheduler`` as a child process with ``env`` and ``options`` on a free port of 127.0.0.1,
    until the block ends; yields its base URL once ``/healthz`` answers 200 (within 30 s). ``tls``: the client context
    the service's certificate is verified with, for a service started with TLS (the URL is then ``https://``)."""
    with serve_child(env, *options, tls=tls) as (url, _process):
        yield url


@contextmanager
def serve_child(
    env: dict[str, str], *options: str, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """:func:`serve_process`, yielding the base URL and the process (whose memory a test may read)."""
    port = free_port()
    command = [sys.executable, "-m", "finops.cli", "serve", "--port", str(port), "--no-scheduler", *options]
    process = subprocess.Popen(command, env=env)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, tls)
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=30)
