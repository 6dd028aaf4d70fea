"""`JobSpec`: what a training job runs, validated once at the door (CLI flags, YAML, or gRPC).

Unknown fields are refused and every impossible value is named with the reason, so a bad
spec fails at submission, not minutes later inside a rank. The daemon fills the defaults
the contract documents (`jobs.proto`: JobSpec).

The model is the one description of a job: each field's section and, where it is not
`--field-name VALUE`, its command-line form are field metadata (`graphtier.contract.options`),
and `job submit`'s options, the wire conversion (`conversions.py`, field by field, under the
same names as `jobs.proto`), the `--json` document and `graphtier.connect()`'s keywords are
derived from it. A new field is this model's field plus `jobs.proto`'s.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import GraphtierError, InvalidRequestError
from graphtier.contract.fanouts import check_channel_fanouts, parse_fanouts
from graphtier.contract.hetero import FeaturelessInit, hop_fanout_bound, split_fanout_hops
from graphtier.contract.inference import DEFAULT_EMBEDDINGS, EmbeddingKind
from graphtier.contract.link import PAIR_FEATURE_DECODERS, DecoderKind, NegativeSampling, TaskKind
from graphtier.contract.messages import describe_validation_error
from graphtier.contract.network import MAX_PEERS
from graphtier.contract.options import Flag, Section
from graphtier.contract.partition import DEFAULT_REPLICATE, check_replicate
from graphtier.contract.storage import MAX_WINDOW, StorageReads

ModelKind = Literal["sage", "gcn", "gat", "rgcn", "rgat", "hgt", "preagg"]
HETERO_MODELS = ("rgcn", "rgat", "hgt", "preagg")  # models of heterogeneous datasets; the others take homogeneous ones
PREAGGREGATED_MODEL = "preagg"  # reads metapath features computed once, not the sampled blocks
DeviceKind = Literal["cpu", "cuda"]


OnNonFinite = Literal["fail", "skip-step", "off"]
FeaturesKind = Literal["replicated", "partitioned"]
SamplerKind = Literal["cpu", "gpu", "auto"]
MAX_NEGATIVES = 100  # negative pairs per positive edge in a link-prediction batch
MpsMode = Literal["auto", "off", "use", "manage"]
DEFAULT_PRODUCER_SM_SHARE = 10.0  # percent of a GPU's SMs a producer may use (DESIGN: about 10%)

JOB = Section("Job")
MODEL = Section("Model")
SAMPLING = Section("Sampling")
OPTIMISATION = Section("Optimisation")
RANKS = Section("Ranks")
NODES = Section("Nodes")
TIERS = Section("Tier budgets")
PIPELINE = Section("Pipeline")
GPU = Section("GPU sharing")
LINK = Section("Link prediction")
INFERENCE = Section("Inference")


# the two forms of a job's hops: plain fanouts, or per-relation ones that set fanouts to their bounds
HOP_FIELDS = frozenset({"fanouts", "relation_fanouts"})


def _hop_bounds(hops: list[str]) -> list[int]:
    """Each per-relation hop's fanout bound (ValueError naming a malformed hop): the plain fanouts they set."""
    return [hop_fanout_bound(hop, hop_number=number) for number, hop in enumerate(hops, start=1)]


def _fanout_flag(text: str) -> dict[str, Any]:
    """--fanout: `15,10,5` sets `fanouts` (and clears a spec file's `relation_fanouts`, which would otherwise
    win over it); hops naming relations (`head-rel-tail:k,...;5`) set `relation_fanouts`, and `fanouts` to
    their bounds (over a spec file's, whose hop count may differ)."""
    if ":" in text or ";" in text:
        hops = split_fanout_hops(text)
        try:
            bounds = _hop_bounds(hops)
        except ValueError:
            return {"relation_fanouts": hops}  # the spec's validation names the bad hop
        return {"relation_fanouts": hops, "fanouts": bounds}
    return {"fanouts": parse_fanouts(text), "relation_fanouts": []}


def _eval_fanout_flag(text: str) -> dict[str, Any]:
    """--eval-fanout: `-1,-1` sets `eval_fanouts`."""
    return {"eval_fanouts": parse_fanouts(text)}


def _nodes_flag(text: str) -> dict[str, Any]:
    """--nodes a,b,c; GraphtierError naming the value when a name is empty."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part for part in parts):
        raise GraphtierError(f"--nodes {text!r}: give node names or HOST:PORT addresses separated by commas")
    return {"nodes": parts}


def _script_flag(text: str) -> dict[str, Any]:
    """--script: a path from the current directory."""
    return {"script": os.path.abspath(os.path.expanduser(text))}


def _ids_flag(text: str) -> dict[str, Any]:
    """--ids: a path from the current directory."""
    return {"ids": os.path.abspath(os.path.expanduser(text))}


def _script_args_flag(text: str) -> dict[str, Any]:
    """--script-args as a shell would split it."""
    try:
        return {"args": shlex.split(text)}
    except ValueError as exc:
        raise GraphtierError(f"--script-args {text!r}: {exc}") from None


class JobSpec(BaseModel):
    """One training job: the dataset, the model, sampling, optimisation and how many ranks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: Annotated[str, JOB] = Field(
        min_length=1, description="Prepared dataset to train on (loaded with `budgets` if needed)."
    )
    model: Annotated[ModelKind, MODEL] = Field(
        "sage",
        description="sage (GraphSAGE mean), gcn or gat on a homogeneous dataset; rgcn (R-GCN), rgat (R-GAT: "
        "attention per relation), hgt (HGT-style attention) or preagg (an MLP over metapath features computed "
        "once: as many hops as fanouts) on a heterogeneous one.",
    )
    fanouts: Annotated[
        list[int],
        SAMPLING,
        Flag(
            "--fanout",
            metavar="HOPS",
            help="Neighbours per hop, e.g. 15,10,5 (-1 = all); on a heterogeneous dataset per relation, hops split by "
            "';': 'paper-written_by-author:10,...;5' (relation_fanouts).",
            parse=_fanout_flag,
            sets=("relation_fanouts",),
        ),
    ] = Field(default_factory=lambda: [10, 5], description="Neighbours per hop; -1 = all.")
    relation_fanouts: Annotated[list[str], SAMPLING] = Field(
        default_factory=list,
        max_length=8,
        description="Heterogeneous: per hop, `head-rel-tail:k,...` (relations not named are not expanded at that "
        "hop) or one int for every relation; empty = `fanouts` for every relation. Sets `fanouts` to each hop's "
        "largest fanout; checked against the dataset's relations at submit.",
    )
    eval_fanouts: Annotated[
        list[int],
        SAMPLING,
        Flag(
            "--eval-fanout",
            metavar="HOPS",
            help="Neighbours per hop when evaluating, e.g. -1,-1 (every neighbour: full neighbourhoods); "
            "default: --fanout. Node classification on one node type; heterogeneous and link jobs evaluate with every "
            "neighbour.",
            parse=_eval_fanout_flag,
        ),
    ] = Field(
        default_factory=list,
        max_length=16,
        description="Neighbours per hop when evaluating a node job on one node type (-1 = all); empty = `fanouts`.",
    )
    batch_size: Annotated[int, SAMPLING] = Field(1024, ge=1, le=1 << 20, description="Seed nodes per batch per rank.")
    hidden: Annotated[int, MODEL] = Field(256, ge=1, le=1 << 16, description="Hidden width of the model.")
    heads: Annotated[int, MODEL] = Field(4, ge=1, le=64, description="Attention heads (gat, rgat and hgt only).")
    epochs: Annotated[int, OPTIMISATION] = Field(1, ge=1, le=100_000, description="Passes over the train ids.")
    lr: Annotated[float, OPTIMISATION] = Field(0.003, gt=0.0, le=10.0, description="Adam learning rate.")
    weight_decay: Annotated[float, OPTIMISATION] = Field(0.0, ge=0.0, le=1.0, description="Adam L2 weight decay.")
    dropout: Annotated[float, MODEL] = Field(0.5, ge=0.0, lt=1.0, description="Dropout probability in [0, 1).")
    embedding_lr: Annotated[float | None, OPTIMISATION] = Field(
        None,
        gt=0.0,
        le=10.0,
        description="Heterogeneous: learning rate of the featureless types' learned embeddings (their own row-wise "
        "Adam, in (0, 10]); unset = a tenth of lr.",
    )
    embedding_weight_decay: Annotated[float, OPTIMISATION] = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Heterogeneous: decoupled weight decay of the learned embeddings in [0, 1]: each row a batch "
        "touches shrinks by embedding_lr x this before its Adam step.",
    )
    embedding_dropout: Annotated[float, MODEL] = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Heterogeneous: dropout on the learned embedding rows of featureless types, in [0, 1).",
    )
    featureless_init: Annotated[FeaturelessInit, MODEL] = Field(
        "auto",
        description="Heterogeneous: a featureless type's input: zero (a learned embedding per node from zero), "
        "neighbour-mean (a linear map of its neighbours' mean features, computed at prepare, plus a learned "
        "residual embedding from zero; refused where no type has means) or auto (neighbour-mean for the types "
        "that have means, zero for the others).",
    )
    nproc_per_node: Annotated[int, RANKS] = Field(
        1, ge=1, le=64, description="Trainer ranks on each node (torchrun --nproc-per-node)."
    )
    nnodes: Annotated[int, NODES] = Field(
        1, ge=1, le=1024, description="Nodes (daemons) the job spans; > 1 = a multi-node job."
    )
    nodes: Annotated[list[str], NODES, Flag(metavar="A,B,...", parse=_nodes_flag)] = Field(
        default_factory=list,
        max_length=1024,
        description="The nodes by name or HOST:PORT (the submitting daemon among them); empty = the submitting daemon "
        "and its first nnodes - 1 serving peers.",
    )
    device: Annotated[DeviceKind, RANKS] = Field(
        "cpu", description="Where ranks compute: cpu (gloo) or cuda (cuda:LOCAL_RANK, NCCL)."
    )
    checkpoint_every_steps: Annotated[int, RANKS] = Field(
        0, ge=0, description="Checkpoint every N steps; 0 = at epoch ends only."
    )
    seed: Annotated[int, OPTIMISATION] = Field(
        0, ge=0, lt=2**63, description="Seed of shuffles, samplers and initialisation."
    )
    budgets: Annotated[BudgetSpec | None, TIERS] = Field(
        None, description="Tier budgets if the dataset must be loaded."
    )
    max_restarts: Annotated[int, RANKS] = Field(
        0,
        ge=0,
        le=100,
        description="Restarts from the newest checkpoint: of the ranks (torchrun --max-restarts), or of a "
        "multi-node job on the nodes that remain after a lost node.",
    )
    num_slots: Annotated[int, PIPELINE] = Field(
        2, ge=2, le=16, description="Ping-pong slots per rank's producer channel."
    )
    storage_reads: Annotated[StorageReads, PIPELINE] = Field(
        "mmap",
        description="How producers read storage-tier rows: mmap (the file "
        "mapping), direct (O_DIRECT, many requests in flight) or page-cache.",
    )
    window: Annotated[int, PIPELINE] = Field(
        0,
        ge=0,
        le=MAX_WINDOW,
        description="Look-ahead window: batches each producer samples ahead, "
        "reading their storage rows early and once; 0 = off.",
    )
    on_nonfinite: Annotated[OnNonFinite, OPTIMISATION] = Field(
        "fail",
        description="A NaN/inf loss or gradient: fail (the job, naming rank and "
        "step), skip-step (skip that optimizer step) or off (not checked).",
    )
    features: Annotated[FeaturesKind, NODES] = Field(
        "replicated",
        description="Feature rows of a multi-node job: replicated (every "
        "node holds every row) or partitioned (the hottest `replicate` share on every "
        "node, each other row on one node, fetched by the others per batch).",
    )
    replicate: Annotated[str, NODES] = Field(
        DEFAULT_REPLICATE,
        description="With partitioned features: the rows, hottest first, every "
        "node holds: a share of the rows (10%; 0.1) or a size of feature bytes per node (512MiB).",
    )
    sampler: Annotated[SamplerKind, SAMPLING] = Field(
        "auto",
        description="Where producers sample: cpu, gpu (on the rank's GPU over the "
        "tiered structure; device cuda only) or auto (gpu on a cuda job whose placement puts "
        "structure on the device and whose daemon has the GPU ops, else cpu); recorded "
        "resolved at submit.",
    )
    mps: Annotated[MpsMode, GPU] = Field(
        "auto",
        description="How cuda producers keep to their SM share: use (a running MPS control "
        "daemon), manage (the daemon runs its own while jobs need it), off (a capped grid) or auto "
        "(use where a control daemon answers, else off); recorded resolved at submit.",
    )
    producer_sm_share: Annotated[float, GPU] = Field(
        DEFAULT_PRODUCER_SM_SHARE,
        gt=0,
        le=100,
        description="Percent of each GPU's SMs "
        "a producer may use: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE under MPS, else its grid.",
    )
    task: Annotated[TaskKind, LINK] = Field(
        "node",
        description="node (classify the seed nodes) or link (link prediction over the dataset's edge split, "
        "made by `dataset prepare --edge-split`).",
    )
    negatives: Annotated[int, LINK] = Field(
        1, ge=1, le=MAX_NEGATIVES, description="Link: negative pairs per positive in training."
    )
    negative_sampling: Annotated[NegativeSampling, LINK] = Field(
        "uniform",
        description="Link: uniform (random node pairs) or corrupt-tail (the positive's source, random tails).",
    )
    decoder: Annotated[DecoderKind, LINK] = Field(
        "dot",
        description="Link: how a pair is scored: dot (the dot product of its embeddings), mlp (an MLP), mlp+cn (an "
        "MLP also fed the pair's common-neighbour features over the training graph) or mlp+cn+aa (that plus a "
        "non-negative weight of the pair's Adamic-Adar, calibrated on validation Hits@50).",
    )
    link_scores: Annotated[bool, LINK] = Field(
        False,
        description="Link: keep the test split's pair scores at the best validation epoch (positives, the negative "
        "pool, each positive's MRR tails) with the pairs' source ids in the job's directory (`link-scores/`), to "
        "recompute its Hits@K and MRR (e.g. with OGB's Evaluator).",
    )
    from_job: Annotated[str, INFERENCE] = Field(
        "",
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]*$",
        description="Inference: the succeeded job whose trained model this job applies, layer by layer over every "
        "neighbour, to every node (or to `ids`); the model's fields are that job's. Empty = a training job.",
    )
    ids: Annotated[
        str,
        INFERENCE,
        Flag(
            metavar="PATH",
            help="Inference: a file of the source's node ids to compute (.npy or one a line).",
            parse=_ids_flag,
        ),
    ] = Field(
        "",
        max_length=4096,
        description="Inference: absolute path of a file of node ids in the source's ids (.npy, or text with one id "
        "a line; heterogeneous: of the target type) whose rows to compute; empty = every node.",
    )
    embeddings: Annotated[EmbeddingKind, INFERENCE] = Field(
        DEFAULT_EMBEDDINGS,
        description="Inference: which rows are written as embeddings: hidden (the last hidden layer) or last-input "
        "(what the last layer's linear maps read, of which the logits are a linear function: a linear probe's "
        "input; GraphSAGE, GCN, GAT, R-GCN and HGT node classifiers).",
    )
    name: Annotated[str, JOB] = Field("", max_length=100, description="Human-readable name shown by `job list`.")
    script: Annotated[
        str,
        JOB,
        Flag(
            metavar="PATH",
            help="Your own training script, run under torchrun (see examples/); empty = the built-in `model`.",
            parse=_script_flag,
        ),
    ] = Field("", max_length=4096, description="Absolute path of the user's training script; empty = `model`.")
    args: Annotated[
        list[str],
        JOB,
        Flag(
            "--script-args",
            metavar="TEXT",
            help="The script's arguments, one string split as a shell would: '--layers 3 --tag x'.",
            parse=_script_args_flag,
        ),
    ] = Field(default_factory=list, max_length=256, description="The script's arguments (sys.argv[1:]).")

    @field_validator(
        "batch_size",
        "hidden",
        "heads",
        "epochs",
        "nproc_per_node",
        "checkpoint_every_steps",
        "seed",
        "max_restarts",
        "num_slots",
        "fanouts",
        "window",
        "nnodes",
        "negatives",
        mode="before",
    )
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        """`epochs: true` in YAML is a mistake, not 1 epoch (pydantic would take a bool as an int)."""
        if isinstance(value, bool) or (isinstance(value, list) and any(isinstance(v, bool) for v in value)):
            raise ValueError(f"expected a number, got {value!r}")
        return value

    @field_validator("replicate", mode="before")
    @classmethod
    def _budget(cls, value: Any) -> str:
        """ "10%", 0.1 or "0.1" as "10%"; a size ("512MiB") as it is; anything else refused naming why."""
        return check_replicate(value)

    @field_validator("fanouts")
    @classmethod
    def _check_fanouts(cls, fanouts: list[int]) -> list[int]:
        return check_channel_fanouts(fanouts)

    @field_validator("eval_fanouts")
    @classmethod
    def _check_eval_fanouts(cls, fanouts: list[int]) -> list[int]:
        return check_channel_fanouts(fanouts) if fanouts else fanouts

    @field_validator("script")
    @classmethod
    def _check_script(cls, script: str) -> str:
        if script and not Path(script).is_absolute():
            raise ValueError(
                f"script {script!r} must be an absolute path (the daemon runs it from the job's directory)"
            )
        return script

    @field_validator("ids")
    @classmethod
    def _check_ids(cls, ids: str) -> str:
        if ids and not Path(ids).is_absolute():
            raise ValueError(f"ids {ids!r} must be an absolute path (the job's ranks read it from the job's directory)")
        return ids

    @field_validator("relation_fanouts")
    @classmethod
    def _check_relation_fanouts(cls, hops: list[str]) -> list[str]:
        for number, hop in enumerate(hops, start=1):
            hop_fanout_bound(hop, hop_number=number)  # the form; the relations are the dataset's, checked at submit
        return [hop.strip() for hop in hops]

    @model_validator(mode="after")
    def _check_heads(self) -> JobSpec:
        if self.model in ("gat", "rgat", "hgt") and self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be divisible by heads={self.heads} for model {self.model}")
        if self.args and not self.script:
            raise ValueError(f"args {self.args} need a script to pass them to")
        if self.nodes and self.nnodes not in (1, len(self.nodes)):
            raise ValueError(f"nnodes={self.nnodes} but nodes names {len(self.nodes)}: {self.nodes}")
        if self.nodes and len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"nodes {self.nodes} names a node twice")
        if len(self.nodes) == 1:
            raise ValueError(
                f"nodes {self.nodes}: a multi-node job needs at least 2 nodes (or none: this daemon alone)"
            )
        if self.nodes and self.nnodes == 1:
            object.__setattr__(self, "nnodes", len(self.nodes))  # frozen: the one place nnodes follows nodes
        if self.sampler == "gpu" and self.device != "cuda":
            raise ValueError(f"sampler 'gpu' samples on the ranks' GPUs: it needs device cuda, not {self.device}")
        if self.sampler == "auto" and self.device == "cpu":
            object.__setattr__(self, "sampler", "cpu")  # frozen: auto is recorded resolved
        if self.task == "link" and self.sampler == "gpu":
            raise ValueError(
                "sampler 'gpu' samples node seeds only: task 'link' (pairs of endpoints, negatives) "
                "samples on the cpu; submit with sampler cpu or auto"
            )
        if self.mps in ("use", "manage") and self.device != "cuda":
            raise ValueError(
                f"mps {self.mps!r} shares the ranks' GPUs with their producers: it needs device cuda, not {self.device}"
            )
        if self.mps == "auto" and self.device == "cpu":
            object.__setattr__(self, "mps", "off")  # frozen: auto is recorded resolved
        if self.task == "node":
            link_only = {"negatives": 1, "negative_sampling": "uniform", "decoder": "dot"}
            for field, default in link_only.items():
                if getattr(self, field) != default:
                    raise ValueError(f"{field}={getattr(self, field)!r} applies to task 'link' only")
        if self.eval_fanouts and len(self.eval_fanouts) != len(self.fanouts):
            raise ValueError(f"eval_fanouts {self.eval_fanouts} must have one entry per hop of fanouts {self.fanouts}")
        self._check_inference()
        if self.features == "partitioned" and self.nnodes == 1:
            raise ValueError(
                "features 'partitioned' splits the rows across nodes: it needs nnodes >= 2 (or nodes); "
                "one node holds every row (features 'replicated')"
            )
        if self.features == "partitioned" and self.nnodes > MAX_PEERS:
            raise ValueError(f"features 'partitioned' supports at most {MAX_PEERS} nodes, got nnodes={self.nnodes}")
        if self.features == "replicated" and self.replicate != DEFAULT_REPLICATE:
            raise ValueError(
                f"replicate={self.replicate} applies to features 'partitioned' only (every row is on "
                "every node with 'replicated')"
            )
        self._check_hetero()
        return self

    def _check_inference(self) -> None:
        """`ids`, `embeddings` and `link_scores` belong to the kind of job they describe. What an inference job
        takes from the job it applies (its model, the machine it runs on) is checked by the daemon at submit."""
        if self.ids and not self.from_job:
            raise ValueError(f"ids {self.ids!r} choose the nodes of an inference job: give from_job too")
        if self.embeddings != DEFAULT_EMBEDDINGS and not self.from_job:
            raise ValueError(f"embeddings {self.embeddings!r} choose an inference job's output: give from_job too")
        if self.link_scores and self.task != "link":
            raise ValueError("link_scores keeps a link job's test scores: it needs task 'link'")

    def _check_hetero(self) -> None:
        """A heterogeneous model's job: per-relation fanouts set `fanouts`; what its batches do not serve is refused."""
        if self.relation_fanouts:
            if self.model not in HETERO_MODELS and not self.script:
                raise ValueError(
                    f"relation fanouts {self.relation_fanouts} sample a heterogeneous graph: they need model rgcn, "
                    f"rgat, hgt or preagg (or a script), not {self.model}"
                )
            bounds = _hop_bounds(self.relation_fanouts)
            if "fanouts" in self.model_fields_set and len(self.fanouts) != len(bounds):
                raise ValueError(
                    f"fanouts {self.fanouts} name {len(self.fanouts)} hop(s) but relation_fanouts "
                    f"{self.relation_fanouts} name {len(bounds)}: relation_fanouts set the hops; give one of them"
                )
            object.__setattr__(self, "fanouts", bounds)  # frozen: the hops' bounds size slots and model layers
        if self.model not in HETERO_MODELS:
            return
        unserved = {
            "device": ("cpu", "heterogeneous batches are gathered into host slots only"),
            "sampler": ("cpu", "the heterogeneous sampler runs on the cpu"),
        }
        for field, (served, why) in unserved.items():
            if getattr(self, field) != served:
                raise ValueError(f"model {self.model}: {field}={getattr(self, field)!r} is not supported ({why})")
        if self.model == PREAGGREGATED_MODEL and self.task == "link":
            raise ValueError(
                f"model {self.model}: task 'link' is not supported (its metapath features are computed for the "
                "target type's node classification); use rgcn, rgat or hgt"
            )
        if self.task == "link" and self.decoder in PAIR_FEATURE_DECODERS:
            raise ValueError(
                f"model {self.model}: decoder {self.decoder!r} is not supported (its common-neighbour features "
                "count shared neighbours of one type; a relation's head and tail types differ here); use dot or mlp"
            )

    @property
    def is_hetero(self) -> bool:
        """Whether the job trains a heterogeneous model (rgcn, rgat, hgt, preagg) on a heterogeneous dataset."""
        return self.model in HETERO_MODELS

    @property
    def infers(self) -> bool:
        """Whether the job applies a trained job's model to the graph (`from_job`) rather than trains one."""
        return bool(self.from_job)

    @property
    def trains(self) -> str:
        """What the job trains, for people: the built-in model's name or the script's file name; an inference
        job's model and the job that trained it."""
        if self.from_job:
            return f"{self.model} of job {self.from_job} (inference)"
        return f"script {Path(self.script).name}" if self.script else self.model

    @property
    def world_size(self) -> int:
        """Ranks of the whole job: nproc_per_node on each of nnodes nodes."""
        return self.nproc_per_node * self.nnodes

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @classmethod
    def build(cls, values: dict[str, Any], *, source: str = "job spec") -> JobSpec:
        """A spec from a mapping of field values, validated.

        Args:
            values: Field name -> value, as a YAML spec or the wire gives them.
            source: Where the values came from, named in the error.

        Returns:
            The spec, with its defaults filled in.

        Raises:
            InvalidRequestError: Unknown fields or impossible values, naming `source`, each bad
                field and why.
        """
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = describe_validation_error(exc, known=cls.model_fields)
            raise InvalidRequestError(f"{source}: invalid job spec: {problems}") from None

    @classmethod
    def from_yaml(cls, path: Path, **overrides: Any) -> JobSpec:
        """A spec from a YAML (or JSON) file, as `graphtier job submit --spec FILE` reads it.

        Args:
            path: The file: a mapping of field names to values. A relative `script:` is taken
                relative to the file's folder.
            **overrides: Field values that win over the file's; None values are ignored.

        Returns:
            The spec, validated as `build` does.

        Raises:
            InvalidRequestError: An unreadable file, one that is not a YAML mapping, or a spec
                `build` refuses, naming the file.
        """
        import yaml  # only here: `job status` and the wire conversions never read YAML

        from graphtier.contract.settings_files import describe_yaml_error, load_yaml

        try:
            loaded = load_yaml(Path(path).read_text())
        except OSError as exc:
            raise InvalidRequestError(f"{path}: cannot read the job spec ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise InvalidRequestError(f"{path}: not valid YAML ({describe_yaml_error(exc)})") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise InvalidRequestError(f"{path}: a job spec must be a mapping of fields, got {type(loaded).__name__}")
        script = loaded.get("script")
        if isinstance(script, str) and script and not Path(script).expanduser().is_absolute():
            loaded["script"] = os.path.normpath(Path(path).resolve().parent / script)  # relative to the spec file
        values = {**loaded, **{key: value for key, value in overrides.items() if value is not None}}
        return cls.build(values, source=str(path))
