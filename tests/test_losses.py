"""The models' built-in losses equal cross-entropy computed by hand from their logits, for any label layout.

Labels cut from a larger tensor (`ids[:, :5]`) are not contiguous; the loss must not depend on that.
"""

import torch
import torch.nn.functional as F
from torch.testing import assert_close

from transformer_zoo import ZooEncoderForMaskedLM


def _hand_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    flat_labels = labels.reshape(-1)
    kept = flat_labels != -100
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1])[kept], flat_labels[kept])


def test_seq2seq_loss_accepts_non_contiguous_labels(make_config, make_model, random_ids):
    model = make_model("seq2seq", make_config("seq2seq"))
    source = random_ids(2, 7)
    labels = random_ids(2, 9, seed=2)[:, :5]
    labels[0, -1] = -100
    assert not labels.is_contiguous()
    output = model(input_ids=source, labels=labels)
    assert_close(output.loss, _hand_loss(output.logits, labels), rtol=0, atol=1e-6)
    assert_close(output.loss, model(input_ids=source, labels=labels.contiguous()).loss, rtol=0, atol=0)


def test_masked_lm_loss_accepts_non_contiguous_labels(make_config, make_model, random_ids):
    model = make_model(ZooEncoderForMaskedLM, make_config("encoder"))
    ids = random_ids(2, 12)
    labels = torch.full((2, 12, 2), -100)
    labels[:, ::3, 1] = ids[:, ::3]
    labels = labels[..., 1]
    assert not labels.is_contiguous()
    output = model(input_ids=ids, labels=labels)
    assert_close(output.loss, _hand_loss(output.logits, labels), rtol=0, atol=1e-6)
