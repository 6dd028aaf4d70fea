"""Every script in examples/, submitted with no flag but the dataset, trains Cora to the literature's
accuracy: `job submit --script` takes the script's own `JOB_DEFAULTS` for what the command line
leaves unset (and the command line wins over them); a bad `JOB_DEFAULTS` is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphtier.contract.errors import InvalidRequestError
from graphtier.contract.jobs.script_defaults import script_defaults
from graphtier.launcher.cli.app import app

EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))
# the examples of graphs with one node type; the heterogeneous ones (hetero_*) train ACM in tests/docs
HOMOGENEOUS_EXAMPLES = [path for path in EXAMPLES if not path.name.startswith("hetero_")]


@pytest.fixture(scope="module")
def cora_root(shared_datasets, tmp_path_factory) -> Path:
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    root = tmp_path_factory.mktemp("examples-prepared")
    source = f"planetoid:{shared_datasets / 'planetoid_cora'}"
    prepare_dataset(PrepareConfig(source=source, name="cora", undirected=True, root=root))
    return root


@pytest.fixture
def cli(cora_root, tmp_path):
    """`cli(*args)` against a daemon serving `cora_root`, started for the test and stopped after it."""
    runner, run = CliRunner(), tmp_path / "run"

    def invoke(*args: object):
        return runner.invoke(app, [str(a) for a in (*args, "--runtime-dir", run)], catch_exceptions=False)

    assert invoke("cluster", "start", "--dataset-root", cora_root, "--json").exit_code == 0
    try:
        yield invoke
    finally:
        assert invoke("cluster", "stop").exit_code == 0
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_submit_takes_the_scripts_job_defaults_under_its_flags(cli):
    for flags, epochs, batch_size in (((), 30, 64), (("--epochs", "1"), 1, 64)):
        sent = cli("job", "submit", "--dataset", "cora", "--script", EXAMPLES_DIR / "pyg_sage.py", *flags, "--json")
        assert sent.exit_code == 0, sent.output
        spec = json.loads(sent.stdout)["spec"]
        assert (spec["epochs"], spec["batch_size"], spec["fanouts"]) == (epochs, batch_size, [25, 10])
        assert cli("job", "cancel", json.loads(sent.stdout)["job_id"]).exit_code == 0


@pytest.mark.slow  # 30 epochs of each example: about 80 s on 2 cores
def test_every_example_with_its_defaults_reaches_the_literatures_accuracy_on_cora(cli):
    pytest.importorskip("torch_geometric", reason="examples/pyg_sage.py needs graphtier[pyg]")
    for script in HOMOGENEOUS_EXAMPLES:
        done = cli("job", "submit", "--dataset", "cora", "--script", script, "--wait", "--json")
        assert done.exit_code == 0, done.output
        job = json.loads(done.stdout)
        assert job["result"]["test_accuracy"] >= 0.78, f"{script.name}: {job['result']}"


def test_job_defaults_are_a_literal_that_leaves_the_jobs_identity_alone(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os\nJOB_DEFAULTS = {'epochs': 3, 'fanouts': [5]}\n")
    assert script_defaults(script) == {"epochs": 3, "fanouts": [5]}
    script.write_text("JOB_DEFAULTS = dict(epochs=3)\n")
    with pytest.raises(InvalidRequestError, match=r"train.py:1: JOB_DEFAULTS must be a literal dict"):
        script_defaults(script)
    script.write_text("x = 1\nJOB_DEFAULTS = {'dataset': 'cora'}\n")
    with pytest.raises(InvalidRequestError, match=r"train.py:2: JOB_DEFAULTS sets \['dataset'\]"):
        script_defaults(script)
    script.write_text("print('no defaults')\n")
    assert script_defaults(script) == {}
