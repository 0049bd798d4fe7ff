"""``gpu-finops nodes``: import the inventory from scontrol output (bad lines named, exit 1), set a model by node or
partition (a model that names no catalog model is one error line naming the choices, exit 2), list it; import and
set-model roll up before they return unless ``--no-rollup``."""

from __future__ import annotations

from pathlib import Path

from finops.cli import app

SCONTROL = Path(__file__).parents[1] / "fixtures" / "scontrol" / "scontrol_nodes_oneliner.txt"


def test_nodes_import_set_model_and_list(cli_env) -> None:  # type: ignore[no-untyped-def]
    imported = cli_env.invoke(app, ["nodes", "import", "-"], input=SCONTROL.read_text())
    assert imported.exit_code == 1, imported.output  # two bad lines, the rest imported
    assert imported.stdout.startswith("11 nodes; 53 GPUs added; 10 nodes entered service, 0 left it, 0 gone; ")
    assert "1 unavailable (drained, down: in service) (gpu-v-01 (DRAIN)); 8 GPU models set" in imported.stdout
    assert "bad lines: no node was taken for gone from the inventory" in imported.stderr
    assert imported.stdout.splitlines()[-1].startswith("rollup: "), "rolled up although lines were bad"
    assert "skipped <stdin>:9: " in imported.stderr and "skipped <stdin>:13: " in imported.stderr
    assert "gpu-finops nodes set-model gpu-v-01 MODEL" in imported.stderr
    by_node = cli_env.invoke(app, ["nodes", "set-model", "gpu-u-01", "h100_80gb"])
    assert by_node.exit_code == 0, by_node.output
    assert "gpu-u-01: GPU model H100-SXM-80GB" in by_node.output
    assert by_node.stdout.splitlines()[-1].startswith("rollup: ")
    by_partition = cli_env.invoke(app, ["nodes", "set-model", "--partition", "legacy", "mi250x", "--no-rollup"])
    assert by_partition.exit_code == 0, by_partition.output
    assert "gpu-u-01, gpu-v-01: GPU model MI250X" in by_partition.output
    assert by_partition.stdout.splitlines()[-1].startswith("rollup: skipped (--no-rollup)")
    refused = cli_env.invoke(app, ["nodes", "set-model", "gpu-v-01", "v100"])
    assert refused.exit_code == 2
    assert refused.stderr.strip().splitlines() == [
        "error: GPU model 'v100' is not a price catalog model; choose one of: A100-SXM4-80GB, B200, H100-SXM-80GB, "
        "H200, L40S, MI210, MI250, MI250X, MI300X"
    ]
    listed = cli_env.invoke(app, ["nodes", "list"])
    assert listed.exit_code == 0
    rows = {line.split()[0]: line.split() for line in listed.output.splitlines()[1:]}
    assert rows["gpu-v-01"][1:3] == ["MI250X", "MI250X"] and rows["gpu-v-01"][5] == "legacy"
    assert rows["gpu-v-01"][6:8] == ["DRAIN", "since"] and "(fan failure" in listed.output
    assert rows["gpu-a-01"][1] == "A100-SXM4-80GB" and rows["gpu-a-01"][5:7] == ["gpu,debug", "IDLE"]


def test_nodes_import_with_a_compute_partition_mode(cli_env) -> None:  # type: ignore[no-untyped-def]
    line = "NodeName=cpx-01 Gres=gpu:mi300x:64(S:0-1) Partitions=amd State=IDLE\n"
    imported = cli_env.invoke(app, ["nodes", "import", "-", "--compute-partition", "mi300x=cpx"], input=line)
    assert imported.exit_code == 0, imported.output
    assert imported.stdout.startswith("1 nodes; 64 GPUs added; ")
    listed = cli_env.invoke(app, ["nodes", "list"])
    assert "MI300X (CPX partition 1/8)" in listed.output
    refused = cli_env.invoke(app, ["nodes", "import", "-", "--compute-partition", "mi300x=spx"], input=line)
    assert refused.exit_code == 2 and "GRES_TYPE=MODE" in refused.stderr
