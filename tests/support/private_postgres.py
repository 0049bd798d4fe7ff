"""A PostgreSQL cluster of the test's own (``initdb`` in a fresh directory, ``pg_ctl`` on a free port of 127.0.0.1),
which a test may stop, start and restart without touching the shared server the other tests use."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.environment import unavailable
from tests.support.servers import free_port

DATABASE = "finops"


def _bin_dir() -> Path:
    """The newest installed PostgreSQL's ``bin`` (Debian: ``/usr/lib/postgresql/<major>/bin``); skips without one
    (fails under ``CI=true``)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        unavailable("PostgreSQL server binaries (/usr/lib/postgresql/*/bin/pg_ctl) are not installed")
    return Path(found[-1]).parent


@dataclass
class PrivatePostgres:
    """A running cluster: :attr:`url` of its database ``finops``; :meth:`stop`, :meth:`start` and :meth:`restart` it
    (each waits until done)."""

    bin_dir: Path
    data: Path
    port: int
    as_user: list[str]

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of database :data:`DATABASE` (user ``postgres``, trust authentication)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def pg_ctl(self, *args: str) -> None:
        """Run ``pg_ctl -D <data> -w <args>`` (as the ``postgres`` user when the test runs as root)."""
        command = [*self.as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args]
        subprocess.run(command, check=True, capture_output=True)

    @property
    def _options(self) -> list[str]:
        """``pg_ctl`` options of the server: its port of 127.0.0.1, socket directory (the data directory) and log."""
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        return ["-l", str(self.data / "server.log"), "-o", options]

    def start(self) -> None:
        """Start the cluster."""
        self.pg_ctl(*self._options, "start")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: stop (clients disconnected, transactions rolled back) and start again."""
        self.pg_ctl(*self._options, "-m", "fast", "restart")

    def stop(self, mode: str = "fast") -> None:
        """Stop the cluster: ``fast`` (clients disconnected, transactions rolled back, a clean shutdown) or
        ``immediate``."""
        self.pg_ctl("-m", mode, "stop")


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A new cluster with an empty database :data:`DATABASE`, running until the block ends, then removed. Run as
    the ``postgres`` user when the test runs as root (``initdb`` refuses root). Its directory is made with
    :func:`tempfile.mkdtemp`, not in pytest's ``tmp_path``, which only root may enter."""
    bin_dir = _bin_dir()
    as_user: list[str] = []
    data = Path(tempfile.mkdtemp(prefix="finops-pg-"))
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(data, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    cluster = PrivatePostgres(bin_dir, data / "data", free_port(), as_user)
    try:
        subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(cluster.data), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--no-sync"], check=True, capture_output=True)  # fmt: skip
        cluster.start()
        try:
            createdb = [*as_user, str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(cluster.port)]
            subprocess.run([*createdb, "-U", "postgres", DATABASE], check=True, capture_output=True)
            yield cluster
        finally:
            subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(cluster.data), "-m", "immediate",
                            "stop"], capture_output=True)  # fmt: skip
    finally:
        shutil.rmtree(data, ignore_errors=True)
