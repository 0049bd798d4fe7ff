"""``serve --tls-cert/--tls-key`` and the collector's ``--ca-file`` over real TLS, with a throwaway CA (trustme): the
collector trusting the CA delivers over https and the readings are stored; one trusting only the system store logs
the certificate failure and keeps the batch spooled until it can be delivered; plain HTTP to the TLS port gets no
answer; a certificate without a key, or a file that cannot be used, is one ``error:`` line; plain HTTP off loopback
is warned of once."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner, Result

from collector import node as node_process
from collector.contract import wire
from collector.contract.sample import Sample
from collector.delivery import Delivery
from collector.shipper import Shipper
from collector.sources.replay import ReplaySource
from collector.spool import Spool
from finops.cli import app
from finops.cli import collector as collector_command
from finops.db.models import GpuSample
from tests.support import scenario
from tests.support.certificates import Certificates, PemFiles
from tests.support.servers import serve_process

TOKEN = "tls-s3cret-token"
READINGS = 60
"""Readings of one batch: the slice's first 30 minutes of its 2 GPUs."""
MISSING_KEY = (
    "error: a TLS certificate (--tls-cert or FINOPS_TLS_CERT_FILE) is set but not a TLS private key (--tls-key or "
    "FINOPS_TLS_KEY_FILE): give both for HTTPS, or neither for plain HTTP"
)
TLS_FREE_ENVIRONMENT = {name: value for name, value in os.environ.items() if not name.startswith("FINOPS_TLS_")}


@pytest.fixture
def pem(tmp_path: Path) -> PemFiles:
    """A CA, and a certificate it signed for 127.0.0.1 and localhost with its key, as files."""
    return Certificates().write(tmp_path)


@pytest.fixture
def https_service(database_url: str, engine, pem: PemFiles) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """``gpu-finops serve --tls-cert … --tls-key …`` as a child process on the migrated database; its https:// URL."""
    env = {**TLS_FREE_ENVIRONMENT, "FINOPS_DATABASE_URL": database_url, "FINOPS_INGEST_TOKEN": TOKEN}
    trusting = ssl.create_default_context(cafile=str(pem.ca))
    with serve_process(env, "--tls-cert", str(pem.cert), "--tls-key", str(pem.key), tls=trusting) as url:
        yield url


def _readings() -> list[Sample]:
    return list(scenario.samples(scenario.start_hour())[:READINGS])


def _stored(sessions: sessionmaker[Session]) -> int:
    with sessions() as session:
        return int(session.scalar(select(func.count()).select_from(GpuSample)) or 0)


def _wait(condition: Callable[[], bool], what: str, timeout_seconds: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fails naming ``what`` after ``timeout_seconds``."""
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_seconds:.0f} s"
        time.sleep(0.05)


sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
"""TLS does not depend on the database: the service tests run on SQLite alone."""


@sqlite_only
def test_the_collector_with_its_ca_file_delivers_over_https(  # type: ignore[no-untyped-def]
    https_service: str, pem: PemFiles, sessions, tmp_path: Path
) -> None:
    assert https_service.startswith("https://")
    config = node_process.NodeConfig(
        service_url=https_service, token=TOKEN, node=scenario.NODE, spool_dir=tmp_path / "spool",
        interval_seconds=0.1, metrics_port=None, ca_file=pem.ca,
    )  # fmt: skip
    stop = threading.Event()
    source = ReplaySource([_readings()])
    collector = threading.Thread(target=node_process.run, args=(config, [source], stop, lambda s: s), daemon=True)
    collector.start()
    try:
        _wait(lambda: _stored(sessions) == READINGS, f"the {READINGS} readings stored")
    finally:
        stop.set()
        collector.join(timeout=30)
    assert not collector.is_alive()


@sqlite_only
def test_without_the_ca_the_certificate_failure_is_logged_and_the_batch_kept(  # type: ignore[no-untyped-def]
    https_service: str, pem: PemFiles, sessions, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path / "spool")
    untrusting = Delivery(spool, Shipper(https_service, TOKEN, scenario.NODE))  # the system's trust store
    assert untrusting.enqueue(_readings()) == READINGS
    with caplog.at_level(logging.WARNING, logger="collector"):
        delay = untrusting.send_next()
    assert delay is not None and delay > 0, "a certificate failure is retried"
    assert untrusting.failed_sends == 1 and spool.pending_samples == READINGS
    [logged] = [record.getMessage() for record in caplog.records]
    assert "TLS certificate verification failed: unable to get local issuer certificate" in logged
    assert "--ca-file" in logged and f"{READINGS} readings kept in the spool" in logged
    assert TOKEN not in logged
    assert _stored(sessions) == 0

    trusting = Delivery(spool, Shipper(https_service, TOKEN, scenario.NODE, ca_file=pem.ca))
    assert trusting.send_next() == 0.0
    trusting.shipper.close()  # an idle TLS connection left open holds the service's shutdown
    assert _stored(sessions) == READINGS and spool.pending_samples == 0


@sqlite_only
def test_plain_http_to_the_tls_port_gets_no_answer(https_service: str) -> None:
    plain = https_service.replace("https://", "http://")
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{plain}/healthz")
    result = Shipper(plain, TOKEN, scenario.NODE).send(wire.batch_dict(_readings()))
    assert result.outcome == "failed" and result.reason.startswith("network error: ")


def test_serve_with_a_certificate_and_no_key_exits_2_with_one_error_line(pem: PemFiles, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "finops.cli", "serve", "--tls-cert", str(pem.cert)],
        capture_output=True, text=True, env={**TLS_FREE_ENVIRONMENT, "FINOPS_DATA_DIR": str(tmp_path / "data")},
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [MISSING_KEY]
    assert not (tmp_path / "data").exists(), "serve opened a database before refusing"


def _encrypted(key: Path, into: Path) -> Path:
    """``key`` encrypted with a pass phrase, written to ``into``."""
    loaded = serialization.load_pem_private_key(key.read_bytes(), password=None)
    into.write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pass phrase"),
        )
    )
    return into


def test_unusable_tls_files_are_one_error_line_naming_the_file(
    pem: PemFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FINOPS_TLS_CERT_FILE", "FINOPS_TLS_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FINOPS_DATA_DIR", str(tmp_path / "data"))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    (tmp_path / "other").mkdir()
    other = Certificates().write(tmp_path / "other")
    cert, key = str(pem.cert), str(pem.key)
    cases = {
        (str(tmp_path / "absent.pem"), key): f"TLS certificate {tmp_path / 'absent.pem'}: No such file or directory",
        (str(junk), key): f"TLS certificate {junk}: no PEM certificate in it",
        (key, key): f"TLS certificate {key}: no PEM certificate in it",
        (cert, str(junk)): f"TLS private key {junk}: not the unencrypted PEM private key of the certificate in {cert}",
        (cert, str(other.key)): f"TLS private key {other.key}: not the unencrypted PEM private key of the certificate",
        (cert, str(_encrypted(pem.key, tmp_path / "encrypted.pem"))): "not the unencrypted PEM private key",
    }
    runner = CliRunner()
    for (cert_file, key_file), expected in cases.items():
        result = runner.invoke(app, ["serve", "--tls-cert", cert_file, "--tls-key", key_file])
        assert result.exit_code == 2, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and expected in line, line
    monkeypatch.setenv("FINOPS_TLS_KEY_FILE", key)
    only_key = runner.invoke(app, ["serve"])
    assert only_key.exit_code == 2
    assert only_key.stderr.splitlines() == [
        "error: a TLS private key (--tls-key or FINOPS_TLS_KEY_FILE) is set but not a TLS certificate (--tls-cert or "
        "FINOPS_TLS_CERT_FILE): give both for HTTPS, or neither for plain HTTP"
    ]
    assert not (tmp_path / "data").exists(), "serve opened a database before refusing"


def test_plain_http_off_loopback_is_warned_of_once_and_tls_settings_reach_uvicorn(  # type: ignore[no-untyped-def]
    cli_env, started, caplog, monkeypatch, pem: PemFiles
) -> None:
    monkeypatch.setenv("FINOPS_INGEST_TOKEN", TOKEN)
    with caplog.at_level(logging.WARNING, logger="finops.cli.serve"):
        for host in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
            assert cli_env.invoke(app, ["serve", "--no-scheduler", "--host", host]).exit_code == 0
        monkeypatch.setenv("FINOPS_TLS_CERT_FILE", str(pem.cert))
        monkeypatch.setenv("FINOPS_TLS_KEY_FILE", str(pem.key))
        assert cli_env.invoke(app, ["serve", "--no-scheduler", "--host", "0.0.0.0"]).exit_code == 0
    clear = [record for record in caplog.records if "clear text" in record.getMessage()]
    assert [record.getMessage().split(":")[0] for record in clear] == ["serving plain HTTP on 0.0.0.0"]
    assert "--tls-cert and --tls-key" in clear[0].getMessage() and "reverse proxy" in clear[0].getMessage()
    assert [(call["host"], call["ssl_certfile"], call["ssl_keyfile"]) for call in started] == [
        *[(host, None, None) for host in ("127.0.0.1", "localhost", "::1", "0.0.0.0")],
        ("0.0.0.0", pem.cert, pem.key),
    ]


def test_collector_ca_file_is_a_pem_bundle_for_an_https_service(
    pem: PemFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configs: list[node_process.NodeConfig] = []
    monkeypatch.setattr(collector_command.node_process, "run", lambda config, *_: configs.append(config))
    monkeypatch.setenv("FINOPS_INGEST_TOKEN", TOKEN)
    monkeypatch.delenv("FINOPS_SERVICE_CA_FILE", raising=False)
    monkeypatch.setenv("COLUMNS", "400")  # the usage error's box, wide enough for a path on one line
    runner = CliRunner()

    def collector(url: str, ca_file: Path) -> Result:
        options = ["--service-url", url, "--ca-file", str(ca_file), "--source", "diskstats"]
        return runner.invoke(app, ["collector", *options, "--spool-dir", str(tmp_path / "spool")])

    absent = collector("https://finops.example.org", tmp_path / "absent.pem")
    assert absent.exit_code == 2 and "--ca-file" in absent.stderr and "absent.pem" in absent.stderr
    not_pem = collector("https://finops.example.org", pem.key)
    assert not_pem.exit_code == 2 and "no PEM certificate in it" in not_pem.stderr
    plain = collector("http://finops.example.org", pem.ca)
    assert plain.exit_code == 2 and "verifies an https:// service" in plain.stderr
    assert configs == []
    monkeypatch.setenv("FINOPS_SERVICE_CA_FILE", str(pem.ca))
    taken = runner.invoke(app, ["collector", "--service-url", "https://finops.example.org", "--source", "diskstats"])
    assert taken.exit_code == 0, taken.output
    assert [config.ca_file for config in configs] == [pem.ca]


@sqlite_only
def test_serve_with_tls_stops_at_once_while_a_client_holds_an_idle_keep_alive(  # type: ignore[no-untyped-def]
    database_url: str, engine, pem: PemFiles, tmp_path: Path
) -> None:
    """A collector's idle keep-alive connection does not hold ``serve`` up: over TLS the server dropped it at the
    signal instead of waiting for a close_notify the client never sends, until the graceful shutdown ran out."""
    from tests.support.servers import free_port

    env = {**TLS_FREE_ENVIRONMENT, "FINOPS_DATABASE_URL": database_url, "FINOPS_INGEST_TOKEN": TOKEN}
    port = free_port()
    command = [sys.executable, "-m", "finops.cli", "serve", "--port", str(port), "--no-scheduler",
               "--tls-cert", str(pem.cert), "--tls-key", str(pem.key)]  # fmt: skip
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    trusting = ssl.create_default_context(cafile=str(pem.ca))
    try:
        _wait(lambda: _answers(f"https://127.0.0.1:{port}", trusting), "serve answering")
        with trusting.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1") as idle:
            idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert idle.recv(4096).startswith(b"HTTP/1.1 200")  # the connection stays open, idle
            process.terminate()
            assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert "timeout graceful shutdown exceeded" not in log.read_text()


def _answers(url: str, tls: ssl.SSLContext) -> bool:
    try:
        return httpx.get(f"{url}/healthz", verify=tls).status_code == 200
    except httpx.TransportError:
        return False
