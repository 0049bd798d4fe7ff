"""A real OpenID Connect provider for the dashboard's log-in tests: the npm package ``oidc-provider`` run by Node.js
(``tests/support/oidc/provider.mjs``; its packages installed by ``.ci/run``: ``npm ci --prefix tests/support/oidc``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.environment import REPO_ROOT, unavailable
from tests.support.servers import free_port

PROVIDER_DIR = REPO_ROOT / "tests" / "support" / "oidc"
START_SECONDS = 30


def provider_command() -> list[str]:
    """``node provider.mjs``; skips (fails under ``CI=true``) when Node.js or the provider's packages are missing."""
    node = shutil.which("node")
    if node is None:
        unavailable("Node.js (node) is not installed: the OpenID Connect provider of the log-in tests runs on it")
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        unavailable("the OpenID Connect provider's packages are not installed: npm ci --prefix tests/support/oidc")
    return [node, str(PROVIDER_DIR / "provider.mjs")]


@contextmanager
def oidc_provider(
    workdir: Path, client_id: str, client_secret: str, redirect_uri: str, accounts: Mapping[str, Mapping[str, object]]
) -> Iterator[str]:
    """Run the provider on a free port of 127.0.0.1 with one client (``client_id``, ``client_secret``, allowed to
    come back to ``redirect_uri`` after log-in and log-out) and ``accounts`` (account id → ID-token claims, any
    password); yields its issuer URL once its discovery document answers (within :data:`START_SECONDS`), and stops
    it after. Its output goes to ``workdir/oidc-provider.log``."""
    command = provider_command()
    port = free_port()
    log = workdir / "oidc-provider.log"
    settings = {
        "OIDC_PORT": str(port),
        "OIDC_CLIENT_ID": client_id,
        "OIDC_CLIENT_SECRET": client_secret,
        "OIDC_REDIRECT_URI": redirect_uri,
        "OIDC_ACCOUNTS": json.dumps(accounts),
    }
    with log.open("w") as output:
        process = subprocess.Popen(
            command, cwd=PROVIDER_DIR, env={**os.environ, **settings}, stdout=output, stderr=subprocess.STDOUT
        )
    issuer = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                if httpx.get(f"{issuer}/.well-known/openid-configuration").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"the OpenID Connect provider did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield issuer
    finally:
        process.terminate()
        process.wait(timeout=30)
