"""The models' built-in losses equal cross-entropy computed by hand from their logits, for any label layout.

Labels cut from a larger tensor (`ids[:, :5]`) are not contiguous; the loss must not depend on that.
"""

import torch
import torch.nn.functional as F
from torch.testing import assert_close

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM, ZooEncoderForMaskedLM
from transformer_zoo import modeling_zoo_losses as losses


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


def test_compiled_training_step_takes_pytorch_cross_entropy_with_the_same_loss_and_gradients(monkeypatch):
    """Under torch.compile the LM loss is F.cross_entropy (AOTAutograd would rewrite LogitsCrossEntropy's in-place
    backward out of place anyway): the same loss and gradients as the eager step through LogitsCrossEntropy."""
    torch.manual_seed(0)
    model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny")).eval()  # no dropout: the same function twice
    ids = torch.randint(3, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))

    def step(forward):
        model.zero_grad()
        loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    calls = []
    original = losses.LogitsCrossEntropy.apply
    monkeypatch.setattr(losses.LogitsCrossEntropy, "apply",
                        lambda *args: (calls.append(torch.compiler.is_compiling()), original(*args))[1])
    eager_loss, eager_grads = step(model)
    compiled_loss, compiled_grads = step(torch.compile(model, fullgraph=True, backend="aot_eager"))
    assert calls == [False]  # the eager step only
    # Two fp32 reductions over the same 32 rows in different orders: within 2 x 32 unit roundoffs of each other, on any
    # CPU (a bound, not what this machine happens to give).
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=64 * 2**-24, atol=0)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)
