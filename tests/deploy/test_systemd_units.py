"""deploy/systemd: each unit passes `systemd-analyze verify` (systemd's own parser: unknown keys, bad values, an
ExecStart that is not executable, a missing install target), runs a gpu-finops command line the CLI takes, and is
hardened: its own user, its settings from an EnvironmentFile, restarted on failure, a read-only system."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.command_lines import parse, parsed_options
from tests.support.environment import REPO_ROOT

UNITS = REPO_ROOT / "deploy" / "systemd"
INSTALLED = "/opt/gpu-finops/bin/gpu-finops"
"""Where the units expect the entry point: a virtualenv at /opt/gpu-finops (docs/deployment.md)."""
COMMANDS = {"serve": ["serve"], "scheduler": ["scheduler"], "collector": ["collector"]}


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / f"gpu-finops-{name}.service")
    return parser


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("systemd-analyze is not installed (.ci/run installs systemd)")
        pytest.skip("systemd-analyze is not installed")
    entry_point = Path(sys.executable).parent / "gpu-finops"
    assert entry_point.is_file(), "the gpu-finops entry point of this environment"
    names = []
    for unit in sorted(UNITS.glob("*.service")):
        text = unit.read_text()
        assert INSTALLED in text, unit.name
        (tmp_path / unit.name).write_text(text.replace(INSTALLED, str(entry_point)))  # verify checks it exists
        names.append(str(tmp_path / unit.name))
    assert len(names) == len(COMMANDS)
    done = subprocess.run(["systemd-analyze", "verify", *names], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    broken = tmp_path / "gpu-finops-broken.service"
    broken.write_text(Path(names[0]).read_text().replace("Restart=on-failure", "Restart=on-failure\nRestrt=always"))
    done = subprocess.run(["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, check=False)
    assert "Unknown key 'Restrt'" in done.stderr, "verify reports what it does not know"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_unit_runs_its_command_hardened(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINOPS_SERVICE_URL", "https://finops.example.org")  # the collector's, from its file
    service = _unit(name)["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == INSTALLED
    assert parse(argv[1:])[1:] == COMMANDS[name]
    assert service["User"] == service["Group"] == "gpu-finops"
    assert service["EnvironmentFile"].startswith("/etc/gpu-finops/")
    assert service["Restart"] == "on-failure"
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes", "CapabilityBoundingSet": "", "UMask": "0077"}.items():  # fmt: skip
        assert service[key] == value, (name, key)
    assert _unit(name)["Install"]["WantedBy"] == "multi-user.target"
    if name == "collector":
        options = parsed_options(argv[1:])
        assert str(options["spool_dir"]).startswith("/var/lib/gpu-finops/"), "its StateDirectory, writable"
        assert service["StateDirectory"] == "gpu-finops"
        assert "PrivateDevices" not in service, "NVML opens /dev/nvidia*"
    else:
        assert service["PrivateDevices"] == "yes"
    if name == "scheduler":
        assert parse(shlex.split(service["ExecStartPre"])[1:])[1:] == ["db", "upgrade"]
    if name == "serve":
        assert "--no-scheduler" in argv and parsed_options(argv[1:])["host"] == "127.0.0.1"
