"""The recipes' --compile: the training loss is compiled as a function of the batch (devices.training_loss), not the
model, so no zero logits gradient is filled at every step, and the masked-LM loss keeps to its labelled rows in the
graph; loss and gradients equal eager.
"""

import math

import pytest
import torch

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM, ZooEncoderConfig, ZooEncoderForMaskedLM
from transformer_zoo.training.engine.devices import create_accelerator, training_loss
from transformer_zoo.training.engine.evaluation import make_loss_fn
from transformer_zoo.training.engine.loop import TrainingConfig


def logits_shaped_fills(step, shape) -> int:
    """Zero fills of a logits-shaped tensor during one training step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    return sum(event.count for event in prof.key_averages(group_by_input_shape=True)
               if event.key in ("aten::fill_", "aten::zero_") and event.input_shapes
               and event.input_shapes[0] == list(shape))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_the_compiled_training_loss_equals_eager_without_a_zero_logits_gradient(label_smoothing, monkeypatch):
    """--compile compiles the loss function, not the model: the graph returns no logits, so AOTAutograd is not
    handed a zero-filled logits-sized gradient for them at every step. Compiling the model, as before, is the
    control: it does fill one. Loss and gradients equal eager (aot_eager does not reorder arithmetic)."""
    original = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: original(fn, backend="aot_eager"))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", hidden_dropout=0.0, embedding_dropout=0.0,
                                                               attention_dropout=0.0))
    ids = torch.randint(3, 1000, (2, 16), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "labels": ids}
    loss_fn = make_loss_fn("causal_lm", label_smoothing)
    accelerator = create_accelerator(TrainingConfig(output_dir="unused", cpu=True, report_to="none"))

    def loss_and_gradients(loss_of):
        model.zero_grad(set_to_none=True)
        loss = loss_of(batch)
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}

    eager_loss, eager_grads = loss_and_gradients(training_loss(model, loss_fn, accelerator, compile_it=False))
    compiled = training_loss(model, loss_fn, accelerator, compile_it=True)
    loss_and_gradients(compiled)  # compiles
    compiled_loss, compiled_grads = loss_and_gradients(compiled)
    # Two fp32 reductions over the same 30 labelled rows in different orders (eager: the zoo's LogitsCrossEntropy or
    # F.cross_entropy; compiled: their aot_eager decompositions): within 2 x 32 unit roundoffs of each other on any
    # CPU, the bound tests/test_losses.py uses. Gradients: its tolerance for the same comparison.
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=64 * 2**-24, atol=0)
    for name in eager_grads:
        torch.testing.assert_close(compiled_grads[name], eager_grads[name], atol=1e-6, rtol=1e-5,
                                   msg=lambda m: f"{name}: {m}")
    loss_fills = logits_shaped_fills(lambda: loss_and_gradients(compiled), (2, 16, 1000))

    compiled_model = torch.compile(model)  # the control: a graph that returns the logits
    loss_and_gradients(lambda b: loss_fn(compiled_model, b))
    model_fills = logits_shaped_fills(lambda: loss_and_gradients(lambda b: loss_fn(compiled_model, b)), (2, 16, 1000))
    torch._dynamo.reset()
    # The model's own loss: the compiled model's graph returns logits nobody differentiates, and gets a zero gradient
    # for them. Smoothed cross-entropy reads the logits after the compiled model, so they get a real gradient, and
    # the one fill either way is its own backward's (decomposed by aot_eager).
    assert (loss_fills, model_fills) == ((0, 1) if label_smoothing == 0.0 else (1, 1))


def test_the_compiled_masked_lm_loss_projects_only_the_labelled_rows(monkeypatch):
    """Under --compile the masked-LM loss keeps its labelled-rows projection (the recipes capture data-dependent
    sizes while the loss runs): no (tokens x vocabulary) tensor is left in the graph, a batch with another number
    of labelled rows reuses it, and loss and gradients equal eager."""
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs = []  # the forward and backward graphs AOTAutograd hands a compiler (inductor's inputs)

    def record(graph_module, _inputs):
        graphs.append(graph_module)
        return graph_module.forward

    def recording_backend(graph_module, example_inputs, **_):
        return aot_module_simplified(graph_module, example_inputs, fw_compiler=record, bw_compiler=record)

    original = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: original(fn, backend=recording_backend))
    torch._dynamo.reset()
    torch.manual_seed(0)
    config = ZooEncoderConfig.from_preset("tiny", hidden_dropout=0.0, embedding_dropout=0.0, attention_dropout=0.0)
    model = ZooEncoderForMaskedLM(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (2, 16), generator=generator)

    def masked_batch(rate):
        masked = torch.rand(ids.shape, generator=generator) < rate
        return {"input_ids": ids.masked_fill(masked, 4), "labels": ids.masked_fill(~masked, -100)}

    accelerator = create_accelerator(TrainingConfig(output_dir="unused", cpu=True, report_to="none"))
    eager = training_loss(model, make_loss_fn(), accelerator, compile_it=False)
    compiled = training_loss(model, make_loss_fn(), accelerator, compile_it=True)

    def loss_and_gradients(loss_of, batch):
        model.zero_grad(set_to_none=True)
        loss = loss_of(batch)
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}

    for rate in (0.15, 0.3):  # two different numbers of labelled rows
        batch = masked_batch(rate)
        eager_loss, eager_grads = loss_and_gradients(eager, batch)
        compiled_loss, compiled_grads = loss_and_gradients(compiled, batch)
        # The same operations on the same rows, not reordered (the recording backend runs dynamo's graph as captured):
        # the tolerances of the test above, bounds for one fp32 reduction order against another.
        torch.testing.assert_close(compiled_loss, eager_loss, rtol=64 * 2**-24, atol=0)
        for name in eager_grads:
            torch.testing.assert_close(compiled_grads[name], eager_grads[name], atol=1e-6, rtol=1e-5,
                                       msg=lambda m: f"{name}: {m}")
    torch._dynamo.reset()
    # One forward and one backward graph: no break at the labelled rows, no recompilation for the second count.
    assert len(graphs) == 2
    shapes = [tuple(node.meta["val"].shape) for graph in graphs for node in graph.graph.nodes
              if isinstance(node.meta.get("val"), torch.Tensor)]
    # The labelled rows' logits have a symbolic number of rows; no tensor has every token's vocabulary row.
    assert any(shape[-1:] == (config.vocab_size,) and not isinstance(shape[0], int) for shape in shapes)
    assert not any(all(isinstance(d, int) for d in shape) and shape[-1:] == (config.vocab_size,)
                   and math.prod(shape[:-1]) == ids.numel() for shape in shapes)
