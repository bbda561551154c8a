"""Parameter counts at the published sizes match transformers' own models (within 1%) and the paper's Transformer
base/big figures (within 5%). Models are built on the meta device, so nothing is allocated."""

import pytest

from transformer_zoo.analysis.parameter_counts import count, counted, published_sizes

SIZES = published_sizes()


@pytest.mark.parametrize("name", sorted(SIZES))
def test_parameter_count_matches_its_reference(name):
    size = SIZES[name]
    zoo, reference = counted(size)
    assert abs(zoo - reference) / reference < size.tolerance, (name, zoo, reference)


def test_a_tied_weight_is_counted_once():
    import torch

    embedding = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = embedding.weight
    assert count(torch.nn.ModuleDict({"e": embedding, "h": head})) == 40


def test_bert_base_is_the_published_count_exactly():
    # A reference count held to the parameter: 109,482,240 for BertModel with its pooler.
    assert counted(SIZES["bert-base"]) == (109482240, 109482240)
