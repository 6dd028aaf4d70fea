"""Advice about a job spec, noticed at submit and shown with the job (`Job.notes` in jobs.proto).

The job runs as submitted; the notes say why its figures may surprise: a batch that covers a
rank's whole shard of the train split trains one step per epoch (the README's first Cora job
trained 3 steps and looked broken at 51%; the steps are the producers' own count, from the
job's `EpochPlan`), and a dataset placed without device budgets serves every row from the
host tier, so the device hit ratio is 0 by construction rather than by a fault; and a dataset
whose labels prepare remapped to dense classes is trained and scored over those classes. A job
whose train split cannot give every rank a seed is refused instead (`epoch_plan`).
"""

from __future__ import annotations

from graphtier.contract.errors import DaemonError, GraphtierError, InvalidRequestError, SamplingError
from graphtier.contract.hetero import check_neighbour_means, starts_from_neighbour_means
from graphtier.contract.jobs.spec import HETERO_MODELS, PREAGGREGATED_MODEL, JobSpec
from graphtier.contract.link import CALIBRATED_DECODERS, DEFAULT_HITS_K
from graphtier.service.pipeline.epoch_plan import EpochPlan
from graphtier.service.prepared.edge_split import link_array
from graphtier.service.store import SharedDatasetHandle


def _num_train(spec: JobSpec, handle: SharedDatasetHandle) -> int:
    """The seeds the job's epochs shuffle and shard: its train edges (a link job) or train ids."""
    train = handle.link_pairs.get(link_array("train")) if spec.task == "link" else handle.splits.get("train")
    return train.shape[0] if train is not None and train.shape else 0


def epoch_plan(spec: JobSpec, handle: SharedDatasetHandle) -> EpochPlan:
    """Rank 0's epoch plan of `spec` on the dataset (every rank runs its steps); InvalidRequestError, before
    anything runs, when the train split cannot give every rank a seed."""
    what = "train edges" if spec.task == "link" else "train ids"
    try:
        return EpochPlan(_num_train(spec, handle), spec.batch_size, spec.seed, 0, spec.world_size, unit=what)
    except SamplingError as exc:
        raise InvalidRequestError(f"dataset {spec.dataset!r}: {exc}") from None


def spec_notes(spec: JobSpec, handle: SharedDatasetHandle) -> list[str]:
    """The notes for `spec` on the dataset `handle` describes (as placed for this job)."""
    notes = []
    what = "train edges" if spec.task == "link" else "ids"
    featureless = handle.resident_features is None and handle.storage_features is None and handle.hetero is None
    trains = not spec.infers  # an inference job takes no steps over the train split and learns nothing
    if (
        trains and spec.task == "link" and featureless
    ):  # a heterogeneous dataset's rows are per type (its featureless types: below)
        notes.append(
            f"dataset {handle.dataset!r} has no node features: the job learns a {spec.hidden}-wide embedding per "
            f"node ({handle.plan.num_nodes:,} rows), gathered per batch and updated sparsely"
        )
    plan = epoch_plan(spec, handle)
    if trains and plan.steps_per_epoch == 1:
        suggest = 1 << (max(plan.shard_size // 2, 1).bit_length() - 1)  # a power of two giving 2+ steps
        notes.append(
            f"batch {spec.batch_size} x {spec.world_size} rank(s) covers the whole train split "
            f"({plan.num_train:,} {what}): 1 step per epoch, {spec.epochs} in all; on a small graph try "
            f"--batch-size {suggest} and more --epochs"
        )
    if handle.class_labels is not None:
        k = len(handle.class_labels)
        notes.append(
            f"dataset {handle.dataset!r} had labels that were not classes 0..{k - 1}; prepare remapped them, "
            f"so the job trains and reports accuracy over {k} classes 0..{k - 1}; class i is source label "
            f"class_labels[i] in the manifest (graphtier dataset inspect {handle.dataset} --json)"
        )
    schema = handle.hetero
    if schema is not None:
        learned = [t for t in schema.node_types if t.featureless]
        if spec.model == PREAGGREGATED_MODEL and not spec.script:
            notes.append(
                f"model {spec.model}: an MLP over the {schema.target_type} nodes' metapath features of "
                f"{len(spec.fanouts)} hop(s) (neighbour means of featured types, propagated train labels), computed "
                "once by the ranks into the job's directory; it reads only the batches' seeds, so --fanout "
                f"{','.join(['1'] * len(spec.fanouts))} samples least"
            )
        elif learned:
            described = ", ".join(f"{t.name} ({t.count:,})" for t in learned)
            rate = f"at lr {spec.embedding_lr:g}" if spec.embedding_lr else "at a tenth of the learning rate"
            notes.append(
                f"node type(s) without features get a learned {spec.hidden}-wide embedding per node in the model, "
                f"learning {rate} by their own row-wise Adam (decoupled weight decay {spec.embedding_weight_decay:g}, "
                f"dropout {spec.embedding_dropout:g}): {described}"
            )
            if spec.featureless_init != "zero":
                zero = [t.name for t in learned if not starts_from_neighbour_means(spec.featureless_init, t)]
                started = [t.name for t in learned if starts_from_neighbour_means(spec.featureless_init, t)]
                if started:
                    notes.append(
                        f"featureless_init {spec.featureless_init}: {', '.join(started)} start from their "
                        "neighbours' mean features through a linear map"
                        + (f"; {', '.join(zero)} (no neighbour means) start at zero" if zero else "")
                    )
                else:  # auto on a graph without means: say why nothing starts from them
                    notes.append(
                        "featureless_init auto: every featureless type starts at zero (no neighbour means: no "
                        "featured neighbour type, or the dataset was prepared before they were computed)"
                    )
    if spec.eval_fanouts and (spec.task == "link" or schema is not None):
        notes.append(
            f"eval_fanouts {spec.eval_fanouts} is not used: a {'link' if spec.task == 'link' else 'heterogeneous'} job "
            "evaluates with every neighbour"
        )
    if schema is not None:
        if all(ref.plan.interleaved_end == 0 for ref in handle.hetero_features.values()):
            notes.append(
                "no device budget: every feature row of every type is on the host tier, so the device hit ratio is 0; "
                "give --num-devices with --device-replicated or --device-interleaved"
            )
    elif handle.plan.interleaved_end == 0:
        notes.append(
            "no device budget: every feature row is on the host tier, so the device hit ratio is 0 and all bytes "
            "count as PCIe; give --num-devices with --device-replicated or --device-interleaved"
        )
    return notes


def check_link_dataset(spec: JobSpec, handle: SharedDatasetHandle) -> None:
    """A link-prediction job needs the dataset's edge split; DaemonError saying how to make one."""
    missing = [
        name for name in (link_array("train"), link_array("val"), link_array("test")) if name not in handle.link_pairs
    ]
    if missing:
        raise DaemonError(
            f"dataset {spec.dataset!r} has no edge split ({', '.join(missing)} missing): task 'link' trains on one; "
            f"prepare it with `graphtier dataset prepare SOURCE --name {spec.dataset} --edge-split 0.85,0.05,0.10`"
        )
    if spec.decoder in CALIBRATED_DECODERS and not handle.link_pairs[link_array("val")].shape[0]:
        raise DaemonError(
            f"the {spec.decoder} decoder weighs Adamic-Adar by validation Hits@{DEFAULT_HITS_K}, and dataset "
            f"{spec.dataset!r} has no validation edges; prepare it with a validation share "
            "(--edge-split 0.85,0.05,0.10) or use --decoder mlp+cn"
        )


def check_hetero_job(spec: JobSpec, handle: SharedDatasetHandle) -> None:
    """A heterogeneous model needs a heterogeneous dataset and such a dataset such a model (or a script); per-relation
    fanouts must name the dataset's relations. InvalidRequestError in one line naming dataset and model."""
    schema = handle.hetero
    if schema is None:
        if spec.model in HETERO_MODELS and not spec.script:
            raise InvalidRequestError(
                f"model {spec.model} trains heterogeneous graphs but dataset {spec.dataset!r} has one node and edge "
                "type; use model sage, gcn or gat"
            )
        if spec.relation_fanouts:
            raise InvalidRequestError(
                f"dataset {spec.dataset!r} has one edge type: relation fanouts {spec.relation_fanouts} need a "
                "heterogeneous "
                "dataset; give --fanout as ints per hop (15,10,5)"
            )
        return
    if spec.model not in HETERO_MODELS and not spec.script:
        raise InvalidRequestError(
            f"dataset {spec.dataset!r} is heterogeneous ({len(schema.node_types)} node types, {len(schema.relations)} "
            f"relations): model {spec.model} takes one node type; use model rgcn, rgat, hgt or preagg"
        )
    if spec.device != "cpu" or spec.sampler != "cpu":
        raise InvalidRequestError(
            f"dataset {spec.dataset!r} is heterogeneous: its batches are sampled and gathered on the cpu "
            f"(got device {spec.device}, sampler {spec.sampler})"
        )
    if spec.featureless_init == "neighbour-mean" and not spec.script:
        try:
            check_neighbour_means(schema)
        except GraphtierError as exc:
            raise InvalidRequestError(f"dataset {spec.dataset!r}: {exc}") from None
    try:
        schema.relation_fanouts(spec.relation_fanouts or spec.fanouts)
    except SamplingError as exc:
        raise InvalidRequestError(f"dataset {spec.dataset!r}, --fanout: {exc}") from None
