"""Write this cluster's pods and nodes to ``DIRECTORY/pods.json`` and ``DIRECTORY/nodes.json``, the lists
``kubectl get pods -A -o json`` and ``kubectl get nodes -o json`` print, for ``gpu-finops import pods``.

The pods-import CronJob's init container runs it (the gpu-finops image has Python but no kubectl): it reads the
API server with the pod's service account, which may only get and list pods and nodes, 500 objects a page as
kubectl does, so the pages are one consistent listing. Any API error (an expired continue token, 403, a network
failure) ends it with exit code 1 and one line on stderr before either file is written, so no import runs on
part of a listing. Standard library only.

    python list_cluster.py DIRECTORY [--server URL --token-file FILE --ca-file FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PAGE_SIZE = 500
LISTS = {"pods.json": ("/api/v1/pods", "PodList"), "nodes.json": ("/api/v1/nodes", "NodeList")}


class ApiError(Exception):
    """A request the API server did not answer with a page of the list."""


def in_cluster_server() -> str:
    """The API server's URL from the variables the kubelet sets in every pod."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def list_all(server: str, path: str, kind: str, token: str, context: ssl.SSLContext | None) -> dict[str, Any]:
    """Every object of the list at ``path``, page by page, as one ``kind`` document."""
    items: list[Any] = []
    token_of_next_page = ""
    while True:
        query = {"limit": PAGE_SIZE, **({"continue": token_of_next_page} if token_of_next_page else {})}
        request = urllib.request.Request(
            f"{server}{path}?{urllib.parse.urlencode(query)}",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=60) as response:
                page = json.load(response)
        except urllib.error.HTTPError as exc:
            raise ApiError(f"GET {path}: HTTP {exc.code}: {_status_message(exc)}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ApiError(f"GET {path}: {exc}") from exc
        items.extend(page.get("items") or [])
        metadata = page.get("metadata") or {}
        token_of_next_page = metadata.get("continue", "")
        if not token_of_next_page:
            resource_version = metadata.get("resourceVersion", "")
            return {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": resource_version}, "items": items}


def _status_message(error: urllib.error.HTTPError) -> str:
    """The ``message`` of the API server's Status answer, else the HTTP reason."""
    try:
        return str(json.load(error).get("message") or error.reason)
    except (ValueError, AttributeError, OSError):
        return str(error.reason)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--server", help="API server URL (default: the pod's cluster)")
    parser.add_argument("--token-file", type=Path, default=SERVICE_ACCOUNT / "token")
    parser.add_argument("--ca-file", type=Path, default=SERVICE_ACCOUNT / "ca.crt")
    args = parser.parse_args(argv)
    server = (args.server or in_cluster_server()).rstrip("/")
    try:
        token = args.token_file.read_text().strip()
        context = ssl.create_default_context(cafile=args.ca_file) if server.startswith("https://") else None
        listings = {name: list_all(server, path, kind, token, context) for name, (path, kind) in LISTS.items()}
    except (ApiError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, listing in listings.items():
        partial = args.directory / f".{name}.partial"
        partial.write_text(json.dumps(listing))
        partial.replace(args.directory / name)
        print(f"{name}: {len(listing['items'])} {listing['kind'][:-4].lower()}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
