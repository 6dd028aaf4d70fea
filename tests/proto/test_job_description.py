"""One description of a job: `JobSpec`. Its fields are those of the wire message (jobs.proto, in the
model's order), of `job submit`'s options, of the `--json` document and of `graphtier.connect()`'s
keywords; every field travels the wire; and a new field is a model field plus a proto field, which
the command line, the conversions, the document and `connect()` then take as they are."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
import typer
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from pydantic import Field
from typer.testing import CliRunner

from graphtier.contract.command_line import FlagCommand, GivenOptions, model_options, with_model_options
from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.conversions import message_values, model_to_message, spec_from_proto, spec_to_proto
from graphtier.contract.jobs.spec import OPTIMISATION, JobSpec
from graphtier.contract.options import Flag, metadata_of
from graphtier.launcher.cli.app import app
from graphtier.launcher.client.job_document import spec_document, spec_fields
from graphtier.launcher.loader import check_keywords, spec_keywords
from graphtier.v1 import jobs_pb2


def field_places(model: type[JobSpec], descriptor: Any, submit: Any) -> dict[str, tuple[str, ...]]:
    """The job fields each place names, in the model's order where the place has one."""
    params = {param.name for param in submit.params}
    reached: set[str] = set()
    for option in model_options(model):
        if option.param in params:
            flag = metadata_of(model.model_fields[option.path[0]], Flag)
            reached |= {option.path[0], *(flag.sets if flag else ())}
    return {
        "model": tuple(model.model_fields),
        "wire": tuple(field.name for field in descriptor.fields if not field.GetOptions().deprecated),
        "document": spec_fields(descriptor),
        "command line": tuple(name for name in model.model_fields if name in reached),
        "connect()": ("dataset", *(name for name in spec_keywords(model) if name != "fanout")),
    }


def _submit_command() -> Any:
    return typer.main.get_command(app).commands["job"].commands["submit"]


def test_every_place_names_the_models_fields_in_its_order():
    places = field_places(JobSpec, jobs_pb2.JobSpec.DESCRIPTOR, _submit_command())
    model = places.pop("model")
    assert all(fields == model for fields in places.values()), {
        where: sorted(set(model) ^ set(fields)) or "order" for where, fields in places.items() if fields != model
    }


def test_every_field_survives_the_wire_and_reads_back_in_the_document():
    spec = JobSpec(
        dataset="d", model="gat", relation_fanouts=["paper-cites-paper:3", "2"], eval_fanouts=[-1, -1],
        batch_size=64, hidden=32, heads=2, epochs=3, lr=0.01, weight_decay=0.001, dropout=0.1,
        embedding_lr=0.002, embedding_weight_decay=0.05, embedding_dropout=0.3, featureless_init="neighbour-mean",
        nproc_per_node=2,
        nodes=["a:1", "b:2"], device="cuda",
        checkpoint_every_steps=5, seed=7, budgets=BudgetSpec(num_devices=1, device_replicated="5%", host="50%"),
        max_restarts=1, num_slots=3, storage_reads="direct", window=4, on_nonfinite="skip-step",
        features="partitioned", replicate="5%", sampler="cpu", mps="use", producer_sm_share=20.0, task="link",
        negatives=3, negative_sampling="corrupt-tail", decoder="mlp", link_scores=True, from_job="7", ids="/x/ids.npy",
        embeddings="last-input",
        name="every field", script="/x/train.py", args=["--layers", "3"],
    )  # fmt: skip
    defaults = {name: field.get_default(call_default_factory=True) for name, field in JobSpec.model_fields.items()}
    assert [name for name, default in defaults.items() if getattr(spec, name) == default] == []
    wire = jobs_pb2.JobSpec.FromString(spec_to_proto(spec).SerializeToString())
    assert spec_from_proto(wire) == spec
    assert spec_document(wire) == spec.model_dump(mode="json")


def test_a_deprecated_wire_field_is_refused_naming_it():
    from graphtier.contract.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="rdzv_id 'r1' are chosen by the coordinating daemon"):
        spec_from_proto(jobs_pb2.JobSpec(dataset="d", rdzv_id="r1"))


class GrownSpec(JobSpec):
    """JobSpec with one more field, written as a field of JobSpec is."""

    warmup_epochs: Annotated[int, OPTIMISATION] = Field(
        0, ge=0, le=100, description="Epochs of linear learning-rate warm-up."
    )


def _grown_message(proto_copy, compile_contract, tmp_path) -> Any:
    """JobSpec's message class compiled from a copy of jobs.proto with the new field."""
    jobs = proto_copy / "graphtier" / "v1" / "jobs.proto"
    text = jobs.read_text()
    end = text.index("}", text.index("message JobSpec {"))
    number = max(field.number for field in jobs_pb2.JobSpec.DESCRIPTOR.fields) + 1  # the next free one
    jobs.write_text(
        text[:end] + f"  // Epochs of linear learning-rate warm-up.\n  uint32 warmup_epochs = {number};\n" + text[end:]
    )
    files = {file.name: file for file in compile_contract(proto_copy, tmp_path / "grown.pb").file}
    pool = descriptor_pool.DescriptorPool()
    timestamp = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
    for file in (timestamp, files["graphtier/v1/common.proto"], files["graphtier/v1/jobs.proto"]):
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("graphtier.v1.JobSpec"))


def test_a_new_field_is_a_model_field_and_a_proto_field(proto_copy, compile_contract, tmp_path):
    grown = _grown_message(proto_copy, compile_contract, tmp_path)
    commands = typer.Typer()
    submitted: list[GrownSpec] = []

    @commands.command(cls=FlagCommand)
    @with_model_options(GrownSpec)
    def submit(*, given: GivenOptions) -> None:
        submitted.append(GrownSpec.build(given.values(), source="command line"))

    submit_command = typer.main.get_command(commands)
    places = field_places(GrownSpec, grown.DESCRIPTOR, submit_command)
    assert all(fields == places["model"] for fields in places.values()) and "warmup_epochs" in places["model"]
    # the model alone is caught: the real message has no such field
    assert field_places(GrownSpec, jobs_pb2.JobSpec.DESCRIPTOR, submit_command)["wire"] != places["model"]

    runner = CliRunner()
    shown = runner.invoke(commands, ["--help"], env={"COLUMNS": "200"})
    assert "--warmup-epochs" in shown.output and "Epochs of linear learning-rate warm-up." in shown.output
    given = runner.invoke(commands, ["--dataset", "d", "--warmup-epochs", "3", "--lr", "0.01"])
    assert given.exit_code == 0, given.output
    spec = submitted[-1]
    assert (spec.warmup_epochs, spec.lr, spec.epochs) == (3, 0.01, 1)

    message = grown()
    model_to_message(spec, message)
    wire = grown.FromString(message.SerializeToString())
    assert wire.warmup_epochs == 3 and GrownSpec.build(message_values(wire, GrownSpec)) == spec
    assert spec_document(wire) == spec.model_dump(mode="json")

    check_keywords({"warmup_epochs": 2, "fanout": "5,5"}, GrownSpec)
    with pytest.raises(GraphtierError, match="unknown keyword 'warmup_epoch' \\(did you mean 'warmup_epochs'\\?\\)"):
        check_keywords({"warmup_epoch": 2}, GrownSpec)
