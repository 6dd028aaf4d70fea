"""An inference job at submit: the job whose model it applies, checked, and that job's model fields.

An inference job (`JobSpec.from_job`) runs the built-in layer-wise inference of a succeeded job's
trained model on the same dataset. Its spec is recorded with the model's fields of that job --
model, layers (fanouts), hidden, heads, task, decoder, ... -- whatever it was submitted with, so
`job status` shows what it applies; the rest (ranks, device, chunk size as `batch_size`, the id
file, which embeddings) is its own. Refused, naming why: an unknown or unfinished job, one that trained
a script's model or was itself an inference job, another dataset, several nodes, a script, embeddings
`last-input` of a model whose last layer it does not split.
"""

from __future__ import annotations

import os
from pathlib import Path

from graphtier.contract.errors import InvalidRequestError, UnknownJobError
from graphtier.contract.inference import LAST_INPUT_MODELS
from graphtier.contract.jobs.artifact import ArtifactError, artifact_dir, read_manifest
from graphtier.contract.jobs.directory import job_directory, job_spec_path
from graphtier.contract.jobs.spec import PREAGGREGATED_MODEL, JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.service.daemon.jobs.table import JobTable

# the fields that describe the trained model: an inference job's are its source job's
MODEL_FIELDS = (
    "model",
    "fanouts",
    "relation_fanouts",
    "hidden",
    "heads",
    "dropout",
    "embedding_dropout",
    "featureless_init",
    "task",
    "negatives",
    "negative_sampling",
    "decoder",
)


def resolve_inference(spec: JobSpec, table: JobTable, runtime_dir: Path) -> JobSpec:
    """`spec` with its source job's model fields (module docstring); InvalidRequestError naming what is wrong."""
    source_id = spec.from_job
    what = f"job spec: from_job {source_id!r}"
    if spec.script:
        raise InvalidRequestError(
            f"{what} runs the built-in layer-wise inference; a script infers with its own model through "
            "job.layerwise() (see the own-script guide): give one or the other"
        )
    if spec.multi_node:
        raise InvalidRequestError(f"{what}: inference runs on one node (its ranks share the layer rows); nnodes 1")
    try:
        record = table.get(source_id)
    except UnknownJobError:
        raise InvalidRequestError(f"{what}: no such job on this daemon") from None
    if record.state != JobState.SUCCEEDED:
        raise InvalidRequestError(f"{what}: that job is {record.state.value}; only a succeeded job's model is applied")
    source_dir = job_directory(runtime_dir, source_id)
    try:
        source = JobSpec.model_validate_json(job_spec_path(source_dir).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidRequestError(f"{what}: its spec cannot be read from {source_dir} ({exc})") from None
    if source.infers:
        raise InvalidRequestError(f"{what} is itself an inference job; give the job that trained the model")
    if source.script:
        raise InvalidRequestError(
            f"{what} trained its script's own model, which only the script can rebuild: infer in the script with "
            "job.layerwise() (see the own-script guide)"
        )
    if source.model == PREAGGREGATED_MODEL:
        raise InvalidRequestError(
            f"{what} trained model {source.model}, an MLP over metapath features rather than layers over "
            "neighbourhoods: layer-wise inference does not apply to it; load its exported model (graphtier.load_model) "
            "and give it the rows of graphtier.service.graph.metapath_features.compute_metapath_features"
        )
    if source.dataset != spec.dataset:
        raise InvalidRequestError(
            f"{what} trained on dataset {source.dataset!r}, not {spec.dataset!r}: its model is applied to the "
            "dataset it was trained on"
        )
    if spec.embeddings == "last-input" and (source.task == "link" or source.model not in LAST_INPUT_MODELS):
        trained = f"a {source.model} link model" if source.task == "link" else f"model {source.model}"
        raise InvalidRequestError(
            f"job spec: embeddings 'last-input' is not supported for {trained} (job {source_id}); it splits the last "
            f"layer of the node classifiers {', '.join(LAST_INPUT_MODELS)}: use embeddings 'hidden'"
        )
    if spec.ids and not os.access(spec.ids, os.R_OK):
        raise InvalidRequestError(f"job spec: ids {spec.ids}: no such file, or not readable by the daemon")
    try:
        read_manifest(artifact_dir(source_dir))  # its exported model: the weights inference applies
    except ArtifactError as exc:
        raise InvalidRequestError(f"{what} has no exported model to apply: {exc}") from None
    return spec.model_copy(update={name: getattr(source, name) for name in MODEL_FIELDS} | {"link_scores": False})
