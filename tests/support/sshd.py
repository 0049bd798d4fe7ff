"""A real OpenSSH server on a free port of 127.0.0.1, for the sacct import over ssh: its own host key, one
authorized client key, and the ssh client configuration that reaches it as ``slurm-head`` (the file the containers'
``ssh -F`` reads, docs/deployment.md)."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.servers import free_port

SSHD = Path("/usr/sbin/sshd")
PRIVILEGE_SEPARATION_DIR = Path("/run/sshd")
"""Where sshd started by root chroots its unprivileged child (Debian's openssh-server makes it at boot)."""


@dataclass(frozen=True)
class Sshd:
    """A running sshd: ``config`` is an ssh client configuration file for the host alias ``slurm-head``."""

    port: int
    config: Path


def _unavailable(message: str) -> None:
    """Skip, or fail under ``CI=true`` (``.ci/run`` installs openssh-server and openssh-client)."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text()


@contextmanager
def sshd(directory: Path) -> Iterator[Sshd]:
    """sshd in the foreground with its files in ``directory``, admitting the current user with a key made for it;
    yields once it accepts connections (within 30 s). Skips (fails under CI) without sshd and ssh."""
    if not SSHD.is_file() or shutil.which("ssh") is None:
        _unavailable("OpenSSH (openssh-server, openssh-client) is not installed")
    if os.geteuid() == 0:
        PRIVILEGE_SEPARATION_DIR.mkdir(mode=0o755, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    host_key = _keygen(directory / "host_key")
    (directory / "authorized_keys").write_text(f"restrict {_keygen(directory / 'id_ed25519')}")
    (directory / "known_hosts").write_text(f"slurm-head {host_key}")
    port = free_port()
    (directory / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host_key'}\nPidFile {directory / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {directory / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
    )
    config = directory / "config"
    config.write_text(
        f"Host slurm-head\n  HostName 127.0.0.1\n  Port {port}\n  User {getpass.getuser()}\n"
        f"  IdentityFile {directory / 'id_ed25519'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {directory / 'known_hosts'}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  HostKeyAlias slurm-head\n"
    )
    log = (directory / "sshd.log").open("wb")
    process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(directory / "sshd_config")], stderr=log)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(["ssh", "-F", str(config), "slurm-head", "true"], capture_output=True).returncode:
            assert process.poll() is None, (directory / "sshd.log").read_text()
            assert time.monotonic() < deadline, (directory / "sshd.log").read_text()
            time.sleep(0.2)
        yield Sshd(port, config)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
