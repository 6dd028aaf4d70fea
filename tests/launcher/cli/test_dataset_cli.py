"""The `graphtier dataset` commands, run as a user runs them: real processes, real files."""

import json
import subprocess
import sys

import pytest


def graphtier(*args, home, check=True):
    done = subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "GRAPHTIER_HOME": str(home)},
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    graphtier(
        "dataset",
        "prepare",
        "synthetic:rmat",
        "--name",
        "tiny",
        "--scale",
        "11",
        "--feature-dim",
        "8",
        "--undirected",
        home=home,
    )
    return home


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_prepare_list_inspect_json(home, shared_datasets):
    done = graphtier(
        "dataset", "prepare", f"planetoid:{shared_datasets}/planetoid_cora", "--name", "cora", "--json", home=home
    )
    manifest = json.loads(done.stdout)
    assert manifest["num_nodes"] == 2708 and manifest["feature_dim"] == 1433 and manifest["num_classes"] == 7
    assert manifest["split_sizes"] == {"train": 140, "val": 500, "test": 1000}
    listed = json.loads(graphtier("dataset", "list", "--json", home=home).stdout)
    assert {m["name"] for m in listed} >= {"cora", "tiny"}
    inspected = json.loads(graphtier("dataset", "inspect", "cora", "--verify", "--json", home=home).stdout)
    assert inspected["verified"] is True and inspected["arrays"]["features"]["shape"] == [2708, 1433]
    human = graphtier("dataset", "list", home=home)
    assert "cora" in human.stderr + human.stdout


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_tiering_report_json_and_png(home, tmp_path):
    png = tmp_path / "fig.png"
    done = graphtier(
        "dataset",
        "tiering-report",
        "tiny",
        "--budget",
        "10%",
        "--fanout",
        "5,5",
        "--batch-size",
        "64",
        "--epochs",
        "2",
        "--png",
        png,
        "--json",
        home=home,
    )
    report = json.loads(done.stdout)
    hits = {o["score"]: o["hit_ratio"] for o in report["outcomes"]}
    assert set(hits) >= {"wrpr", "rpr", "degree", "source order", "oracle"}
    assert all(hits["oracle"] >= h - 1e-12 for h in hits.values())
    assert report["budget_rows"] == 2048 // 10 and report["epochs"] == 2 and report["device_tiers_simulated"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = graphtier("dataset", "tiering-report", "tiny", "--fanout", "5,5", "--batch-size", "64", home=home)
    assert "oracle" in table.stdout and "accounted" in table.stdout and "storage tier" not in table.stdout


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_tiering_report_refuses_a_figure_it_cannot_write_or_draw(home, tmp_path, prepared_acm):
    """--png naming a directory is refused before the replay, leaving nothing beside it (no `.NAME.tmp`);
    on a heterogeneous dataset, whose report draws no figure and has no storage tier, --png and
    --host-budget are refused instead of ignored."""
    folder = tmp_path / "figures"
    folder.mkdir()
    args = ["dataset", "tiering-report", "--fanout", "5,5", "--batch-size", "64", "--epochs", "1"]
    refused = graphtier(*args, "tiny", "--png", folder, home=home, check=False)
    assert refused.returncode == 2 and f"--png {folder}: a directory" in refused.stderr, refused.stderr
    assert list(tmp_path.iterdir()) == [folder] and not any(folder.iterdir())
    root = prepared_acm.directory.parent
    for flag, value in (("--png", tmp_path / "acm.png"), ("--host-budget", "30%")):
        hetero = graphtier(*args, "acm", "--out", root, flag, value, home=home, check=False)
        assert hetero.returncode == 2 and f"{flag}: not served for heterogeneous dataset 'acm'" in hetero.stderr
    assert list(tmp_path.iterdir()) == [folder]


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_tiering_report_without_matplotlib_skips_only_the_figure(home, tmp_path):
    """An install without the `plots` extra (the container image): the report in full, one line on the figure."""
    png = tmp_path / "fig.png"
    args = ["dataset", "tiering-report", "tiny", "--fanout", "5,5", "--batch-size", "64", "--png", str(png)]
    blocked = (
        "import sys; sys.modules['matplotlib'] = None; sys.argv = ['graphtier', *sys.argv[1:]]; "
        "from graphtier.launcher.cli.entry import main; main()"
    )

    def run(*extra):
        done = subprocess.run(
            [sys.executable, "-c", blocked, *args, *extra],
            capture_output=True,
            text=True,
            timeout=300,
            env={**__import__("os").environ, "GRAPHTIER_HOME": str(home)},
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return done

    skipped = f"figure skipped ({png}): matplotlib is not installed; pip install 'graphtier[plots]' draws it"
    table = run()
    assert "oracle" in table.stdout and "figure:" not in table.stdout
    assert [line for line in table.stderr.splitlines() if "figure" in line] == [skipped]
    report = run("--json")
    assert json.loads(report.stdout)["png"] is None and skipped in report.stderr
    assert not png.exists() and not list(tmp_path.iterdir())


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_tiering_report_gives_the_storage_tiers_reads_at_a_host_budget(home):
    args = (
        "dataset",
        "tiering-report",
        "tiny",
        "--budget",
        "0",
        "--fanout",
        "5,5",
        "--batch-size",
        "64",
        "--host-budget",
        "20%",
        "--window",
        "4",
    )
    storage = json.loads(graphtier(*args, "--json", home=home).stdout)["storage"]
    assert storage["storage_from"] == 2048 // 5 and [w["depth"] for w in storage["windows"]] == [0, 1, 2, 4]
    assert storage["rows_per_batch"] == storage["windows"][0]["read_rows_per_batch"] > 0
    assert "storage tier at host budget 20%" in graphtier(*args, home=home).stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["prepare", "bogus:x", "--name", "b"], "bogus"),
        (["prepare", "edges:/nonexistent/e.txt", "--name", "b"], "/nonexistent/e.txt"),
        (["prepare", "synthetic:rmat", "--name", "tiny", "--scale", "8"], "already exists"),
        (["prepare", "synthetic:rmat", "--name", "b", "--score", "pagerank"], "unknown score 'pagerank'"),
        (["prepare", "synthetic:rmat", "--name", "b", "--scale", "0"], "scale must be in"),
        (["prepare", "synthetic:rmat", "--name", "b/c"], "invalid dataset name"),
        (["tiering-report", "tiny", "--budget", "150%"], "150%"),
        (["tiering-report", "tiny", "--budget", "1GiB"], "larger than the"),
        (["tiering-report", "tiny", "--budget", "ten"], "ten"),
        (["tiering-report", "tiny", "--fanout", "a,b"], "--fanout 'a,b'"),
        (["tiering-report", "tiny", "--fanout", "5,0"], "fanout 0"),
        (["tiering-report", "tiny", "--host-budget", "99%"], "--host-budget 99% is"),
        (["tiering-report", "tiny", "--host-budget", "10%", "--window", "100"], "--window 100"),
        (["tiering-report", "nope"], "no dataset named 'nope'"),
        (["inspect", "nope"], "no dataset named 'nope'"),
    ],
)
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_bad_input_exits_2_with_a_clear_message(home, args, message):
    before = sorted(p.name for p in (home / "datasets").iterdir())
    done = graphtier("dataset", *args, home=home, check=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in (home / "datasets").iterdir()) == before
