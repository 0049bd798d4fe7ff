"""The command line's layout: ``gpu-finops collector`` on a node without the service extra, the stand-ins for the
service commands there, user errors as one ``error: …`` line with exit code 2, and no import cycle in finops.cli."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

from typer.main import get_command
from typer.testing import CliRunner

import finops.cli
from finops.cli import app
from finops.cli.base import SERVICE_COMMANDS, command_tree

NODE_ONLY = textwrap.dedent(
    """
    import atexit, importlib.abc, sys

    SERVICE = {"alembic", "altair", "apscheduler", "fastapi", "pandas", "psycopg", "pyarrow", "sqlalchemy",
               "starlette", "streamlit", "uvicorn", "yaml"}


    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in SERVICE:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, NotInstalled())
    atexit.register(lambda: print("service modules loaded:", sorted(m for m in sys.modules if m in SERVICE)))
    from finops.cli import app

    sys.argv = ["gpu-finops", *sys.argv[1:]]
    app()
    """
)
"""A GPU node: the service extra's packages (and the dashboard's) cannot be imported; then ``gpu-finops ARGS``."""


def _on_a_node(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NODE_ONLY, *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_the_collector_runs_without_the_service_extra() -> None:
    result = _on_a_node("collector", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout and "--service-url" in result.stdout
    assert result.stdout.rstrip().endswith("service modules loaded: []")
    listing = _on_a_node("--help")
    assert listing.returncode == 0, listing.stderr
    assert all(name in listing.stdout for name in ("collector", "report", "import", "serve"))


def test_the_slurm_scripts_are_found_without_the_service_extra(tmp_path: Path) -> None:
    """The slurm.conf lines name the shipped scripts where the package is installed; the Prolog they name writes
    the mapping of a job's GPUs (the scripts' own behaviour: tests/collector/test_jobmap.py)."""
    result = _on_a_node("slurm-scripts")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "service modules loaded: []"
    settings = dict(line.split("=", 1) for line in lines[:-1])
    assert list(settings) == ["Prolog", "Epilog", "PrologFlags"] and settings["PrologFlags"] == "Alloc"
    package = Path(finops.cli.__file__).parents[2] / "collector" / "jobmap" / "slurm"
    assert settings["Prolog"] == str(package / "prolog.sh") and settings["Epilog"] == str(package / "epilog.sh")
    environment = {"PATH": "/usr/bin:/bin", "GPU_JOB_MAPPING_DIR": str(tmp_path), "NVIDIA_SMI": "absent"}
    subprocess.run([settings["Prolog"]], env={**environment, "SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "3"}, check=True)
    assert (tmp_path / "3").read_text() == "7 \n"


def test_service_commands_say_they_need_the_extra() -> None:
    for args in (["report", "--start", "2026-01-01", "--end", "2026-02-01"], ["db", "upgrade"], ["import", "--help"]):
        result = _on_a_node(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.splitlines() == [
            f"gpu-finops {args[0]} needs the service extra: pip install 'gpu-finops[service]'"
        ]
        assert "service modules loaded: []" in result.stdout


def test_every_service_command_is_listed_and_found_in_its_module() -> None:
    tree = dict((tuple(path), command) for path, command in command_tree(get_command(app), []))
    assert {path[0] for path in tree if len(path) == 1} == {"collector", "slurm-scripts", *SERVICE_COMMANDS}
    for name in SERVICE_COMMANDS:
        assert tree[(name,)].name == name, name


def test_a_command_loads_only_its_own_module() -> None:
    """``gpu-finops report`` imports the report command's module, not the web service, scheduler or alerts."""
    probe = "import sys; from finops.cli import app; sys.argv = ['gpu-finops', 'report', '--help']\n"
    probe += (
        "try:\n    app()\nexcept SystemExit:\n    print(sorted(m for m in sys.modules if m.startswith('finops.cli.')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120)
    loaded = result.stdout.strip().splitlines()[-1]
    assert "finops.cli.report" in loaded and "finops.cli.serve" not in loaded and "finops.cli.alerts" not in loaded


def test_command_modules_do_not_import_the_package() -> None:
    """Each module of finops/cli imports what it shares from finops.cli.context or .base, never finops.cli's
    namespace (only __init__ and __main__ do), so there is no import cycle."""
    package = Path(finops.cli.__file__).parent
    for path in package.glob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "finops.cli", f"{path.name} imports from finops.cli"
            if isinstance(node, ast.Import):
                assert all(alias.name != "finops.cli" for alias in node.names), path.name


def test_bad_settings_are_one_error_line(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FINOPS_IDLE_THRESHOLD_RATIO", "5")
    result = CliRunner().invoke(app, ["report", "--start", "2026-01-01", "--end", "2026-02-01"])
    assert result.exit_code == 2
    assert result.output.startswith("error: settings: FINOPS_IDLE_THRESHOLD_RATIO: ")
    assert len(result.output.splitlines()) == 1


def test_an_unreadable_token_file_is_a_bad_option(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["collector", "--service-url", "http://127.0.0.1:9", "--token-file", str(tmp_path / "absent")]
    )
    words = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2
    assert "No such file or directory" in words and "--token-file" in words
