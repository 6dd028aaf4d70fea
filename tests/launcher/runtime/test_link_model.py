"""Learned node embeddings: rows gathered per batch, gradients applied sparsely to those rows only."""

import pytest
import torch

from graphtier.launcher.runtime.link_model import LinkModel, NodeEmbeddings
from graphtier.service.sampling import Block


def test_a_step_updates_only_the_touched_rows_as_sparse_adam_does():
    torch.manual_seed(0)
    table = NodeEmbeddings(6, 4, lr=0.1)
    before = table.weight.clone()
    reference = torch.nn.Parameter(before.clone())
    ids = torch.tensor([3, 1, 3])  # a row twice in one batch: its gradients add up
    rows = table.rows(ids)
    (rows * torch.arange(1.0, 13.0).view(3, 4)).sum().backward()
    assert table.apply_gradients(ids, rows.grad) == 2

    optimizer = torch.optim.SparseAdam([reference], lr=0.1)
    grad = torch.zeros(6, 4).index_add_(0, ids, torch.arange(1.0, 13.0).view(3, 4))
    reference.grad = grad.to_sparse()
    optimizer.step()
    assert torch.allclose(table.weight, reference.detach(), atol=1e-6)
    untouched = [0, 2, 4, 5]
    assert torch.equal(table.weight[untouched], before[untouched])
    assert not torch.equal(table.weight[[1, 3]], before[[1, 3]])
    assert table.steps.tolist() == [0, 1, 0, 1, 0, 0]


def test_the_table_is_part_of_the_checkpointed_state():
    model = LinkModel("sage", 8, 8, 2)
    model.embeddings = NodeEmbeddings(5, 8, lr=0.01)
    state = model.state_dict()
    assert {"embeddings.weight", "embeddings.exp_avg", "embeddings.exp_avg_sq", "embeddings.steps"} <= set(state)
    assert all(not name.startswith("embeddings.") for name, _ in model.named_parameters())  # not Adam's to step


def test_the_common_neighbour_decoder_reads_pair_features():
    torch.manual_seed(0)
    model = LinkModel("sage", 8, 8, 2, decoder="mlp+cn")
    assert model.reads_pair_features and not LinkModel("sage", 8, 8, 2, decoder="mlp").reads_pair_features
    h, pairs = torch.randn(4, 8), torch.tensor([[0, 1], [2, 3]])
    apart, close = torch.zeros(2, 3), torch.tensor([[2.0, 1.5, 0.7]] * 2)
    assert not torch.equal(model.score(h, pairs, apart), model.score(h, pairs, close))
    with pytest.raises(ValueError, match="mlp\\+cn decoder .* none were given"):
        model.score(h, pairs)
    blocks = [Block(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([1, 0, 3, 2]), 4, 4)] * 2
    x = torch.randn(4, 8)
    model.eval()
    both = model(blocks, x, pairs, close, auxiliary=True)  # training: its embedding-only head's logits too
    assert both.shape == (2, 2) and torch.equal(both[0], model(blocks, x, pairs, close))
    assert not torch.equal(both[1], both[0])


def test_the_adamic_adar_residual_is_calibrated_on_validation_hits():
    from graphtier.launcher.runtime.link_eval import calibrate
    from graphtier.launcher.runtime.link_model import CALIBRATION_WEIGHTS

    torch.manual_seed(0)
    model = LinkModel("sage", 8, 8, 2, decoder="mlp+cn+aa")
    decoder = model.decoder
    # 10 positives the heuristic ranks first but the learned score last, among 200 negatives
    learned = torch.cat([torch.zeros(10), torch.linspace(1.0, 2.0, 200)])
    features = torch.zeros(210, 3)
    features[:10, 1] = 1.0
    weight = calibrate(decoder, learned, features, 10, hits_k=5)
    assert weight == CALIBRATION_WEIGHTS[-1]  # ties at the best Hits@K: the heuristic's order is kept
    assert decoder.calibration["val_hits@5"] == 1.0 and decoder.calibration["learned_val_hits@5"] == 0.0

    h, pairs = torch.randn(4, 8), torch.tensor([[0, 1], [2, 3]])
    close = torch.tensor([[2.0, 1.5, 0.7]] * 2)
    plain = LinkModel("sage", 8, 8, 2, decoder="mlp+cn")
    plain.decoder.load_state_dict(decoder.state_dict(), strict=False)  # the same learned part
    assert torch.equal(model.score(h, pairs, close), plain.score(h, pairs, close))  # training: mlp+cn's score
    model.eval()
    assert torch.allclose(model.score(h, pairs, close), plain.score(h, pairs, close) + weight * 1.5)
    # where the learned score ranks the positives first and the heuristic favours 20 negatives, it weighs little
    features = torch.zeros(210, 3)
    features[-20:, 1] = 1.0
    weight = calibrate(decoder, torch.cat([torch.full((10,), 3.0), learned[10:]]), features, 10, 5)
    assert weight < 2.0 and decoder.calibration["val_hits@5"] == 1.0
    assert "decoder.calibrated_weight" in model.state_dict()  # a checkpoint keeps it


def test_a_hetero_link_model_refuses_the_common_neighbour_decoders():
    from graphtier.contract.hetero import HeteroSchema, NodeTypeInfo, RelationInfo
    from graphtier.launcher.runtime.hetero_link import HeteroLinkModel

    schema = HeteroSchema(
        node_types=[NodeTypeInfo(name="paper", count=4, offset=0, feature_dim=8)],
        relations=[RelationInfo(head="paper", name="cites", tail="paper", num_edges=3)],
        target_type="paper",
    )
    HeteroLinkModel(schema, 8, decoder="mlp")  # the pair decoders that need no graph are built
    for decoder in ("mlp+cn", "mlp+cn+aa"):
        with pytest.raises(ValueError, match=f"the {decoder.replace('+', '.')} decoder reads common-neighbour .* dot"):
            HeteroLinkModel(schema, 8, decoder=decoder)
