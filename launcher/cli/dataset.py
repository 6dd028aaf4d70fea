"""`graphtier dataset ...`: prepare, list, inspect, remove, tiering-report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from graphtier.contract.command_line import FlagTyper
from graphtier.contract.link import DEFAULT_EVAL_NEGATIVES
from graphtier.launcher.cli.options import JsonOption
from graphtier.launcher.cli.rendering import (
    console,
    emit_json,
    error_boundary,
    human_bytes,
    report_console,
    step_observer,
)

app = FlagTyper(help="Prepare and inspect datasets.", no_args_is_help=True)

OutOption = Annotated[
    Path | None, typer.Option("--out", help="dataset root directory (default $GRAPHTIER_HOME/datasets)")
]


def _source_options(**options: object) -> dict[str, object]:
    return {key: value for key, value in options.items() if value is not None}


def _edge_split(text: str | None, seed: int, eval_negatives: int, target_relation: str | None) -> object | None:
    """--edge-split (and --target-relation) as a spec; a bad value is a usage error naming the flag."""
    if text is None:
        if target_relation is not None:
            from graphtier.contract.errors import InvalidRequestError

            raise InvalidRequestError(
                f"--target-relation {target_relation}: give the split of its edges too, "
                "e.g. --edge-split 0.85,0.05,0.10"
            )
        return None
    from pydantic import ValidationError

    from graphtier.contract.errors import InvalidRequestError
    from graphtier.contract.messages import describe_validation_error
    from graphtier.service.prepared.edge_split import EdgeSplitSpec

    try:
        return EdgeSplitSpec.parse(text, seed=seed, eval_negatives=eval_negatives, target_relation=target_relation)
    except ValidationError as exc:
        raise InvalidRequestError(f"--edge-split {text!r}: {describe_validation_error(exc, inputs=False)}") from None
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


@app.command()
def prepare(
    source: Annotated[
        str, typer.Argument(help="synthetic:rmat | planetoid:DIR | npz:FILE | edges:FILE | ogb:DIR | geomgcn:DIR")
    ],
    name: Annotated[str, typer.Option("--name", help="name of the prepared dataset")],
    score: Annotated[str, typer.Option(help="hotness score: wrpr, rpr, degree, none, or user:PATH.npy")] = "wrpr",
    iterations: Annotated[int | None, typer.Option(help="PageRank iterations (wrpr default 5, rpr 20)")] = None,
    damping: Annotated[float, typer.Option(help="PageRank damping factor")] = 0.85,
    score_fanout: Annotated[
        int | None, typer.Option(help="wrpr/rpr: model a k-neighbour sample, min(1,k/d), instead of 1/d")
    ] = None,
    undirected: Annotated[bool, typer.Option("--undirected", help="add the reverse of every edge")] = False,
    out: OutOption = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace an existing dataset of that name")] = False,
    dataset_group: Annotated[
        str | None,
        typer.Option(
            "--dataset-group",
            help="a Unix group that may read the dataset (0750/0640); default: only you (directory 0700, files 0600)",
        ),
    ] = None,
    memory_budget: Annotated[
        str,
        typer.Option(
            help="peak memory the preparation may use: a size (3GiB), a share of RAM (40%), 'auto' (half of RAM) "
            "or 'unlimited' (everything in memory, about 3x the dataset)"
        ),
    ] = "auto",
    # "\\[": a literal bracket; help texts are rich markup, where "[synthetic]" would be a style tag.
    scale: Annotated[int | None, typer.Option(help="\\[synthetic] log2 of the node count")] = None,
    edge_factor: Annotated[int | None, typer.Option(help="\\[synthetic] edges per node")] = None,
    num_classes: Annotated[
        int | None,
        typer.Option(
            help="classes: labels must be 0..N-1 (or -1), kept as they are; without it labels that are not "
            "0..k-1 are remapped to dense classes, noted. \\[synthetic] planted communities"
        ),
    ] = None,
    feature_dim: Annotated[
        int | None,
        typer.Option(help="\\[synthetic] feature dimension; \\[geomgcn] feature width (default: from the rows)"),
    ] = None,
    feature_format: Annotated[
        str | None,
        typer.Option(
            help="\\[geomgcn] feature rows: 'indices' of nonzero entries (film), 'dense' values, or 'auto' "
            "(rows of differing lengths are indices)"
        ),
    ] = None,
    homophily: Annotated[float | None, typer.Option(help="\\[synthetic] fraction of intra-community edges")] = None,
    seed: Annotated[int | None, typer.Option(help="\\[synthetic] generator seed")] = None,
    features: Annotated[Path | None, typer.Option(help="\\[edges] node feature file (.npy or text)")] = None,
    labels: Annotated[Path | None, typer.Option(help="\\[edges] node label file (.npy or text)")] = None,
    skip_rows: Annotated[int | None, typer.Option(help="\\[edges] header lines to skip (default: detect)")] = None,
    one_based: Annotated[bool | None, typer.Option("--one-based", help="\\[edges] ids start at 1")] = None,
    missing_features: Annotated[
        str | None, typer.Option(help="\\[planetoid] 'error' or 'zeros' for nodes the files give no features")
    ] = None,
    split: Annotated[
        Path | None,
        typer.Option(
            help="the split that comes with the data: an .npz of masks (train_mask/val_mask/test_mask, [N] or "
            "[N, K]; Geom-GCN's *_split_0.6_0.2_K.npz) or of id arrays (train/val/test, train_idx/valid_idx/"
            "test_idx), in the source's node ids; replaces the source's own split"
        ),
    ] = None,
    split_index: Annotated[
        int | None, typer.Option(help="which split of a --split file holding several ([N, K] masks)")
    ] = None,
    default_split: Annotated[
        bool,
        typer.Option(
            "--default-split",
            help="accept the random 10/5/10 split for a source without one (else jobs refuse the dataset)",
        ),
    ] = False,
    split_scheme: Annotated[
        str | None, typer.Option(help="\\[ogb] sub-folder of split/ (inferred when there is one)")
    ] = None,
    no_reverse_relations: Annotated[
        bool,
        typer.Option(
            "--no-reverse-relations",
            help="\\[heterogeneous ogb] leave out tail-rev_<rel>-head, added for every relation by default",
        ),
    ] = False,
    split_seed: Annotated[int | None, typer.Option(help="seed of the random split when the source has none")] = None,
    train_fraction: Annotated[float | None, typer.Option(help="random split when the source has none")] = None,
    val_fraction: Annotated[float | None, typer.Option(help="random split when the source has none")] = None,
    test_fraction: Annotated[float | None, typer.Option(help="random split when the source has none")] = None,
    edge_split: Annotated[
        str | None,
        typer.Option(
            help="link prediction: train,val,test shares of the edges (0.85,0.05,0.10), or files:DIR (val.txt, "
            "test.txt and optionally *_neg.txt pairs); val and test edges leave the graph, undirected graphs split "
            "by pair (as PyG's RandomLinkSplit)"
        ),
    ] = None,
    target_relation: Annotated[
        str | None,
        typer.Option(
            help="\\[heterogeneous ogb] link prediction on a heterogeneous graph: the relation HEAD-REL-TAIL, "
            "whose edges --edge-split splits (paper-written_by-author); its val and test edges leave the graph both "
            "ways"
        ),
    ] = None,
    edge_split_seed: Annotated[int, typer.Option(help="seed of the edge split and its negative pools")] = 0,
    eval_negatives: Annotated[
        int, typer.Option(help="random negative pairs kept per evaluation split (OGB collab: 100000)")
    ] = DEFAULT_EVAL_NEGATIVES,
    json_out: JsonOption = False,
) -> None:
    """Read SOURCE, score and reorder it by hotness, and write a prepared dataset atomically."""
    from graphtier.service.hotness import ScoreSpec
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    with error_boundary():
        config = PrepareConfig(
            source=source,
            name=name,
            score=ScoreSpec.parse(score, iterations=iterations, damping=damping, fanout=score_fanout),
            undirected=undirected,
            root=out,
            overwrite=overwrite,
            group=dataset_group,
            memory_budget=memory_budget,
            edge_split=_edge_split(edge_split, edge_split_seed, eval_negatives, target_relation),
            source_options=_source_options(
                scale=scale,
                edge_factor=edge_factor,
                num_classes=num_classes,
                feature_dim=feature_dim,
                homophily=homophily,
                seed=seed,
                features=str(features) if features else None,
                labels=str(labels) if labels else None,
                skip_rows=skip_rows,
                one_based=one_based,
                missing_features=missing_features,
                feature_format=feature_format,
                split_file=str(split) if split else None,
                split_index=split_index,
                default_split=default_split or None,
                split_scheme=split_scheme,
                reverse_relations=False if no_reverse_relations else None,
                split_seed=split_seed,
                train_fraction=train_fraction,
                val_fraction=val_fraction,
                test_fraction=test_fraction,
            ),
        )
        observe, stop = step_observer()
        try:
            manifest = prepare_dataset(config, observer=observe)
        finally:
            stop()
    if json_out:
        emit_json(manifest)
        return
    report_console.print(
        f"[green]prepared[/] {manifest.name}: {manifest.num_nodes:,} nodes, {manifest.num_edges:,} edges, "
        + (f"{manifest.feature_dim} features" if manifest.hetero is None else f"features {feature_summary(manifest)}")
        + f", {manifest.num_classes} classes, score {manifest.score['label']}; "
        f"{manifest.timings_s['total']:.1f}s, peak memory {human_bytes(manifest.peak_rss_bytes)}"
        + (
            f" (budget {human_bytes(manifest.memory_budget_bytes)})" if manifest.memory_budget_bytes else " (no budget)"
        ),
        highlight=False,
    )
    report_console.print(f"split: {split_summary(manifest)}", highlight=False, markup=False)
    if manifest.hetero is not None:
        types = ", ".join(
            f"{t.name} {t.count:,}" + (f" ({t.feature_dim} features)" if t.feature_dim else " (learned embedding)")
            for t in manifest.hetero.node_types
        )
        report_console.print(f"node types: {types}; target {manifest.hetero.target_type}", highlight=False)
        report_console.print(f"relations: {', '.join(r.key for r in manifest.hetero.relations)}", highlight=False)
    for note in manifest.notes:
        console.print(f"note: {note}", highlight=False, markup=False)


def feature_summary(manifest) -> str:
    """A prepared dataset's feature width: one number, or for a heterogeneous dataset each node type's width
    ("paper:1870, author:learned"), since its rows are stored per type and `feature_dim` is 0."""
    if manifest.hetero is None:
        return str(manifest.feature_dim)
    return ", ".join(f"{t.name}:{t.feature_dim or 'learned'}" for t in manifest.hetero.node_types)


def split_summary(manifest) -> str:
    """Which split a prepared dataset trains and evaluates on, in one line: its sizes and how it was made."""
    sizes = "/".join(f"{manifest.split_sizes.get(part, 0):,}" for part in ("train", "val", "test"))
    rule = manifest.source_description.get("split") or {}
    if rule.get("file"):
        index = "" if rule.get("index") is None else f", split {rule['index']}"
        return f"train/val/test {sizes} from {rule['file']}{index}"
    if "seed" in rule:
        fractions = "/".join(f"{rule[f'{part}_fraction']:g}" for part in ("train", "val", "test"))
        unchosen = " (the default, not chosen: jobs refuse it)" if rule.get("asked") is False else ""
        return (
            f"train/val/test {sizes}: random {fractions} of the {rule.get('among', 'nodes')}, "
            f"split seed {rule['seed']}{unchosen}"
        )
    return f"train/val/test {sizes}: the source's own" + (f" ({rule['rule']})" if rule.get("rule") else "")


@app.command("list")
def list_(out: OutOption = None, json_out: JsonOption = False) -> None:
    """List prepared datasets."""
    from graphtier.contract.endpoints import default_dataset_root
    from graphtier.service.prepared import list_datasets

    with error_boundary():
        manifests = list_datasets(out)
    if json_out:
        emit_json(manifests)
        return
    table = Table(title=f"datasets in {out or default_dataset_root()}")
    for column in ("name", "nodes", "edges", "features", "classes", "score", "size", "source"):
        table.add_column(column)
    for m in manifests:
        table.add_row(
            m.name,
            f"{m.num_nodes:,}",
            f"{m.num_edges:,}",
            feature_summary(m),
            str(m.num_classes),
            str(m.score["kind"]),
            human_bytes(m.total_bytes),
            m.source,
        )
    report_console.print(table)


@app.command()
def inspect(
    name: str,
    out: OutOption = None,
    verify: Annotated[bool, typer.Option("--verify", help="recompute every checksum")] = False,
    json_out: JsonOption = False,
) -> None:
    """Show a prepared dataset's manifest (and check its files with --verify)."""
    from graphtier.service.prepared import PreparedDataset

    with error_boundary():
        dataset = PreparedDataset.open(name, out)
        if verify:
            dataset.verify()
    m = dataset.manifest
    if json_out:
        emit_json({**m.model_dump(mode="json"), "path": str(dataset.directory), "verified": verify})
        return
    table = Table(title=f"{m.name} ({dataset.directory})", show_header=False)
    for key, value in (
        ("source", m.source),
        ("created", m.created_at),
        ("format version", m.format_version),
        ("nodes", f"{m.num_nodes:,}"),
        ("edges", f"{m.num_edges:,}"),
        ("undirected", m.undirected),
        ("features", feature_summary(m)),
        ("classes", m.num_classes),
        (
            "class labels",
            f"remapped; class i was source label {m.class_labels}" if m.class_labels else "as in the source",
        ),
        ("splits", split_summary(m)),
        ("score", m.score["label"]),
        ("size", human_bytes(m.total_bytes)),
        ("timings (s)", m.timings_s),
        ("peak memory", human_bytes(m.peak_rss_bytes)),
        ("memory budget", human_bytes(m.memory_budget_bytes) if m.memory_budget_bytes else "none (in memory)"),
        ("checksums", "verified" if verify else "not checked"),
        *(("note", note) for note in m.notes),
    ):
        table.add_row(key, str(value))
    for key, info in m.arrays.items():
        table.add_row(f"  {key}", f"{info.dtype} {info.shape} sha256 {info.sha256[:16]}…")
    report_console.print(table)


@app.command()
def remove(name: str, out: OutOption = None) -> None:
    """Delete a prepared dataset."""
    from graphtier.service.prepared import remove_dataset

    with error_boundary():
        path = remove_dataset(out, name)
    console.print(f"removed {path}")


@app.command("tiering-report")
def tiering_report(
    name: str,
    budget: Annotated[
        str, typer.Option(help="device-tier budget: a share of the feature bytes (10%) or a size (512MiB)")
    ] = "10%",
    fanout: Annotated[str, typer.Option(help="neighbours per hop, -1 = all")] = "15,10,5",
    batch_size: Annotated[int, typer.Option(help="seeds per mini-batch")] = 1024,
    epochs: Annotated[
        int | None,
        typer.Option(help="epochs to replay (default: whole epochs until the figures settle)", show_default=False),
    ] = None,
    seed: Annotated[int, typer.Option(help="shuffle and sampling seed")] = 0,
    png: Annotated[
        Path | None, typer.Option(help="where to write the figure (default <dataset>/tiering-report.png)")
    ] = None,
    host_budget: Annotated[
        str | None,
        typer.Option(
            help="host-tier feature bytes after the device tier (30% or 2GiB): adds the storage tier's expected reads"
        ),
    ] = None,
    window: Annotated[
        int, typer.Option(help="with --host-budget: look-ahead window depths to show, up to this many batches")
    ] = 4,
    out: OutOption = None,
    json_out: JsonOption = False,
) -> None:
    """Replay sampled epochs; print each score's device-tier hit ratio at BUDGET against the oracle's,
    and with --host-budget the storage tier's reads per batch and epoch, without and with a window.
    Says how many batches and rows it replayed, and when that is too few for the figures to hold."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from graphtier.contract.errors import GraphtierError
    from graphtier.contract.fanouts import parse_fanouts
    from graphtier.service.prepared import PreparedDataset
    from graphtier.service.tiering import build_tiering_report
    from graphtier.service.tiering.plot import PlotsNotInstalled, write_cumulative_access_png

    with error_boundary():
        dataset = PreparedDataset.open(name, out)
        if png is not None and png.is_dir():
            raise GraphtierError(f"--png {png}: a directory; give the file to write the figure to")
        if dataset.manifest.hetero is not None:
            unserved = [flag for flag, given in (("--png", png), ("--host-budget", host_budget)) if given is not None]
            if unserved:
                raise GraphtierError(
                    f"{', '.join(unserved)}: not served for heterogeneous dataset {name!r} (its report is a table "
                    "of the device tier's hit ratio per node type); leave them out"
                )
            _hetero_tiering_report(dataset, budget, fanout, batch_size, epochs, seed, json_out)
            return
        fanouts = parse_fanouts(fanout)
        with Progress(
            "replaying epochs",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("replay", total=None)
            report = build_tiering_report(
                dataset,
                budget=budget,
                fanouts=fanouts,
                batch_size=batch_size,
                epochs=epochs,
                seed=seed,
                on_batch=lambda done, total: progress.update(task, completed=done, total=total),
                host_budget=host_budget,
                window=window,
            )
        try:
            report.png = str(write_cumulative_access_png(report, png or dataset.directory / "tiering-report.png"))
        except PlotsNotInstalled as skipped:  # the report stands without its figure
            console.print(str(skipped), highlight=False, markup=False, soft_wrap=True)
    if json_out:
        emit_json(report)
        return
    table = Table(
        title=(
            f"{report.dataset}: device tier {report.budget} = {report.budget_rows:,} of {report.num_nodes:,} rows "
            f"({human_bytes(report.budget_bytes)}); fanout {fanout}, batch {report.batch_size}, "
            f"{report.epochs} epoch(s), {report.batches} batches"
        ),
        caption=(
            "device tiers accounted, not real (no GPU): the figures are exact, they are what a GPU would see"
            + ("; row size assumed 512 B (dataset has no features)" if report.row_bytes_assumed else "")
        ),
    )
    for column in ("score", "hit ratio", "vs oracle", "host->device per epoch"):
        table.add_column(column, justify="right" if column != "score" else "left")
    for o in report.outcomes:
        table.add_row(
            o.score, f"{o.hit_ratio:.1%}", f"{o.ratio_to_oracle:.1%}", human_bytes(o.host_to_device_bytes_per_epoch)
        )
    report_console.print(table)
    _print_coverage(report.coverage)
    if report.storage is not None:
        report_console.print(_storage_table(report))
    if report.png is not None:
        report_console.print(f"figure: {report.png}")


def _hetero_tiering_report(
    dataset, budget: str, fanout: str, batch_size: int, epochs: int | None, seed: int, json_out: bool
):
    """The tiering report of a heterogeneous dataset: one byte budget over all types, hit ratios per type."""
    from graphtier.contract.hetero import split_fanout_hops
    from graphtier.service.tiering.hetero import build_hetero_tiering_report, split_budget

    report = build_hetero_tiering_report(
        dataset, budget=budget, fanouts=split_fanout_hops(fanout), batch_size=batch_size, epochs=epochs, seed=seed
    )
    if json_out:
        emit_json(report)
        return
    schema = dataset.manifest.hetero
    split = split_budget(schema, dataset.scores, report.budget_bytes)
    rows = ", ".join(f"{t} {n:,} rows" for t, n in split.rows.items())
    table = Table(
        title=(
            f"{report.dataset}: device tier {report.budget} = {human_bytes(report.budget_bytes)} of "
            f"{human_bytes(report.featured_bytes)} feature bytes ({rows}); fanout {fanout}, batch {report.batch_size}, "
            f"{report.epochs} epoch(s), {report.batches} batches"
        ),
        caption="byte hit ratios; device tiers accounted, not real (no GPU)"
        + (
            f"; {', '.join(report.featureless_types)}: learned embeddings, not tiered"
            if report.featureless_types
            else ""
        ),
    )
    types = [t.node_type for t in report.outcomes[0].per_type]
    for column in ("score", "hit ratio", "vs oracle", *types):
        table.add_column(column, justify="right" if column != "score" else "left")
    for o in report.outcomes:
        table.add_row(
            o.score, f"{o.hit_ratio:.1%}", f"{o.ratio_to_oracle:.1%}", *(f"{t.hit_ratio:.1%}" for t in o.per_type)
        )
    report_console.print(table)
    _print_coverage(report.coverage)


def _print_coverage(coverage) -> None:
    """What the replay covered (always), and plainly when its figures are not reliable."""
    from graphtier.service.tiering.replay import AUTO_MAX_BATCHES, AUTO_MAX_READS, SETTLED_WITHIN

    epochs = f"{coverage.epochs:,} epoch{'s' if coverage.epochs != 1 else ''}"
    line = (
        f"replayed {coverage.batches:,} batch{'es' if coverage.batches != 1 else ''} "
        f"({epochs}{', as --epochs asked' if coverage.stopped == 'epochs' else ''}), "
        f"{coverage.distinct_rows:,} distinct rows, {coverage.reads:,} reads"
    )
    if coverage.stopped == "settled":
        line += f"; figures settled (each within {SETTLED_WITHIN * 100:g} point of its value at half the batches)"
    elif coverage.drift is not None:
        line += f"; figures moved up to {coverage.drift * 100:.1f} points over the later half"
    if coverage.stopped == "read cap":
        line += f"; stopped at the cap of {AUTO_MAX_READS:,} row reads"
    elif coverage.stopped == "batch cap":
        line += f"; stopped at the cap of {AUTO_MAX_BATCHES:,} batches"
    report_console.print(line, highlight=False, markup=False)
    if not coverage.reliable:
        report_console.print(f"NOT RELIABLE: {coverage.warning}", style="bold yellow", highlight=False, markup=False)


def _storage_table(report) -> Table:
    """The storage tier at --host-budget: its reads per batch and epoch, without and with a window."""
    s = report.storage
    table = Table(
        title=(
            f"storage tier at host budget {s.host_budget}: rows {s.storage_from:,}.. ({s.storage_rows:,} rows, "
            f"{human_bytes(s.storage_bytes)}); {s.share_of_reads:.1%} of rows gathered, {s.rows_per_batch:,.0f} rows "
            f"({human_bytes(s.row_bytes_per_batch)}) per batch, {human_bytes(s.row_bytes_per_epoch)} per epoch"
        ),
        caption="device bytes: the direct reader's 4 KiB-aligned requests; one producer's stream of batches",
    )
    for column in ("window", "hit ratio", "rows read / batch", "device bytes / batch", "device bytes / epoch"):
        table.add_column(column, justify="right")
    for w in s.windows:
        table.add_row(
            "off" if w.depth == 0 else str(w.depth),
            f"{w.hit_ratio:.1%}",
            f"{w.read_rows_per_batch:,.0f}",
            human_bytes(w.read_bytes_per_batch),
            human_bytes(w.read_bytes_per_epoch),
        )
    return table
