"""Strict only where transformers is strict (issue 39): three calls transformers' own models accept, which earlier
checks of ours refused. Each test failed on the code before its fix.

1. `from_pretrained(None, config=..., state_dict=...)`: a model from weights in memory, no folder.
2. transformers' loss keywords (`shift_labels`, `ignore_index`) passed through a head's **kwargs to its loss.
3. special token ids outside the vocabulary (`GPT2Config(vocab_size=N)` keeps GPT-2's 50256): a warning at
   construction, a refusal only when such an id reaches the model as an input.
"""

import re

import pytest
import torch
from transformers.testing_utils import CaptureLogger

import transformer_zoo as tz
from transformer_zoo import configuration_zoo_common, modeling_zoo_checks


HEADS = {
    "decoder": (tz.ZooDecoderForCausalLM, lambda: tz.ZooDecoderConfig.from_preset("tiny")),
    "llama-style decoder": (tz.ZooDecoderForCausalLM, lambda: tz.ZooDecoderConfig.from_preset("tiny-llama")),
    "encoder": (tz.ZooEncoderForMaskedLM, lambda: tz.ZooEncoderConfig.from_preset("tiny")),
    "seq2seq": (tz.ZooSeq2SeqForConditionalGeneration, lambda: tz.ZooSeq2SeqConfig.from_preset("tiny")),
    "vit": (tz.ZooViTForImageClassification, lambda: tz.ZooViTConfig.from_preset("tiny", num_labels=3)),
}
IDS = torch.randint(3, 1000, (2, 7), generator=torch.Generator().manual_seed(0))


# ----------------------------------------------------------------------------- 1. from_pretrained with no folder
@pytest.mark.parametrize("family", list(HEADS))
def test_from_pretrained_none_builds_from_config_and_state_dict(family):
    model_class, make_config = HEADS[family]
    torch.manual_seed(0)
    source = model_class(make_config())
    state = source.state_dict()
    loaded = model_class.from_pretrained(None, config=make_config(), state_dict=state)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def test_a_missing_local_folder_is_named_as_one(tmp_path):
    for missing in (tmp_path / "nothing-here", str(tmp_path / "nothing-here"), "./runs/nothing/here"):
        with pytest.raises(OSError, match="No such folder: .*nothing.*Give the folder a model was saved to"):
            tz.ZooDecoderForCausalLM.from_pretrained(missing)


# ---------------------------------------------------------------------------------- 2. transformers' loss keywords
def test_loss_keywords_are_transformers_own():
    """The accepted list is read from transformers' losses, not written here."""
    import inspect

    from transformers.loss.loss_utils import ForCausalLMLoss

    assert {"shift_labels", "ignore_index"} <= modeling_zoo_checks.LOSS_KEYWORDS
    assert set(modeling_zoo_checks.LOSS_KEYWORDS) <= set(inspect.signature(ForCausalLMLoss).parameters)


@pytest.mark.parametrize("family", ["decoder", "llama-style decoder"])
def test_shift_labels_are_the_targets_of_a_causal_lm(family):
    """The loss follows shift_labels and not labels, equal to transformers' ForCausalLMLoss given them; without
    shift_labels it equals shifting labels. Both losses are float32 (transformers upcasts the logits to float32, the
    zoo does the same), one a mean and the other a sum over a count: they agree to float32 rounding, 1e-6."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    model_class, make_config = HEADS[family]
    torch.manual_seed(0)
    model = model_class(make_config()).eval().double()
    shifted = torch.nn.functional.pad(IDS, (0, 1), value=-100)[:, 1:]
    other = torch.roll(shifted, 1, dims=-1)
    with torch.no_grad():
        logits = model(input_ids=IDS).logits
        reference = ForCausalLMLoss(logits, None, logits.shape[-1], shift_labels=other)
        plain = model(input_ids=IDS, labels=IDS).loss
        same = model(input_ids=IDS, labels=IDS, shift_labels=shifted).loss
        moved = model(input_ids=IDS, labels=IDS, shift_labels=other).loss
        labels_changed = model(input_ids=IDS, labels=torch.zeros_like(IDS), shift_labels=other).loss
        alone = model(input_ids=IDS, shift_labels=other).loss
    torch.testing.assert_close(same, plain, rtol=0, atol=0)
    torch.testing.assert_close(moved, reference, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(labels_changed, moved, rtol=0, atol=0)
    torch.testing.assert_close(alone, moved, rtol=0, atol=0)
    assert not torch.isclose(moved, plain)


def test_shift_labels_under_chunked_loss_equal_the_dense_loss():
    config = tz.ZooDecoderConfig.from_preset("tiny", loss_chunk_size=5)
    torch.manual_seed(0)
    chunked = tz.ZooDecoderForCausalLM(config).eval().double()
    dense = tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("tiny")).eval().double()
    dense.load_state_dict(chunked.state_dict())
    other = torch.roll(torch.nn.functional.pad(IDS, (0, 1), value=-100)[:, 1:], 1, dims=-1)
    with torch.no_grad():
        torch.testing.assert_close(chunked(input_ids=IDS, labels=IDS, shift_labels=other).loss,
                                   dense(input_ids=IDS, labels=IDS, shift_labels=other).loss, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("family", ["decoder", "encoder", "seq2seq"])
def test_ignore_index_leaves_those_targets_out(family):
    """ignore_index=7 on labels holding 7 gives the loss of the same labels with -100 there (transformers'
    fixed_cross_entropy reads ignore_index the same way)."""
    model_class, make_config = HEADS[family]
    torch.manual_seed(0)
    model = model_class(make_config()).eval().double()
    marked, ignored = IDS.clone(), IDS.clone()
    marked[:, 2:5], ignored[:, 2:5] = 7, -100
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=IDS, labels=marked, ignore_index=7).loss,
                                   model(input_ids=IDS, labels=ignored).loss, rtol=0, atol=0)


def test_shift_labels_on_a_head_with_aligned_labels_is_named_not_dropped():
    model = tz.ZooEncoderForMaskedLM(tz.ZooEncoderConfig.from_preset("tiny")).eval()
    modeling_zoo_checks.logger.warning_once.cache_clear()
    with CaptureLogger(modeling_zoo_checks.logger) as captured, torch.no_grad():
        model(input_ids=IDS, labels=IDS, shift_labels=IDS)
    assert "ZooEncoderForMaskedLM ignores shift_labels" in captured.out


def test_loss_keywords_on_a_base_model_are_accepted_and_named():
    """transformers' base models take any keyword; a zoo base model takes the loss keywords and says it ignores
    them (a misspelt keyword is still refused: tests/test_model_contract.py)."""
    model = tz.ZooDecoderModel(tz.ZooDecoderConfig.from_preset("tiny")).eval()
    modeling_zoo_checks.logger.warning_once.cache_clear()
    with CaptureLogger(modeling_zoo_checks.logger) as captured, torch.no_grad():
        plain = model(input_ids=IDS).last_hidden_state
        given = model(input_ids=IDS, shift_labels=IDS).last_hidden_state
    assert torch.equal(plain, given)
    assert "ZooDecoderModel ignores shift_labels: it computes no loss" in captured.out


# --------------------------------------------------------------------- 3. special token ids outside the vocabulary
def test_gpt2_style_ids_outside_the_vocabulary_build_with_a_warning(tmp_path):
    configuration_zoo_common.logger.warning_once.cache_clear()
    with CaptureLogger(configuration_zoo_common.logger) as captured:
        config = tz.ZooDecoderConfig.from_preset("tiny", vocab_size=1000, bos_token_id=50256, eos_token_id=50256)
    assert "eos_token_id=50256 is not a token of the vocabulary (ids 0..999)" in captured.out
    assert "generate() never stops on it" in captured.out
    model = tz.ZooDecoderForCausalLM(config)
    model.save_pretrained(tmp_path)
    reloaded = tz.ZooDecoderForCausalLM.from_pretrained(tmp_path)
    assert (reloaded.config.bos_token_id, reloaded.config.eos_token_id) == (50256, 50256)
    with torch.no_grad():  # trains and runs on ids inside the vocabulary
        assert torch.isfinite(reloaded(input_ids=IDS, labels=IDS).loss)
    # The id is refused where it reaches the model.
    with pytest.raises(ValueError, match="outside the vocabulary of 1000"):
        reloaded(input_ids=torch.tensor([[50256, 5, 6]]))


@pytest.mark.parametrize("pad_token_id", [-1, 1000])
def test_a_pad_id_outside_the_vocabulary_names_no_embedding_row(pad_token_id):
    """Hub configs hold pad_token_id=-1; nn.Embedding would refuse 1000 and take -1 as the last row."""
    model = tz.ZooEncoderForMaskedLM(tz.ZooEncoderConfig.from_preset("tiny", pad_token_id=pad_token_id))
    assert model.get_input_embeddings().padding_idx is None


def test_resizing_past_a_special_token_warns():
    model = tz.ZooSeq2SeqForConditionalGeneration(tz.ZooSeq2SeqConfig.from_preset("tiny"))
    with CaptureLogger(modeling_zoo_checks.logger) as captured:
        model.resize_token_embeddings(2)
    assert "eos_token_id=2 falls outside the new vocabulary (ids 0..1)" in captured.out
    assert model.get_input_embeddings().num_embeddings == 2


# -------------------------------------------------------------------- the unclear errors, each now one clear line
def _saved_decoder(folder, **config_edits):
    import json

    tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("tiny")).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in config_edits.items():
        if value is None:
            del config[key]
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_config_without_model_type_is_named_by_the_zoo_readers(tmp_path):
    """transformers reads the zoo's auto_map and asks to trust remote code; the zoo's scripts and recipes (which
    open folders with read_model_config) say what is missing and which type to write. The family's own class loads
    the folder, as transformers' own classes load theirs."""
    folder = _saved_decoder(tmp_path / "model", model_type=None)
    with pytest.raises(ValueError, match='has no "model_type".*add "model_type": "zoo_decoder" to it'):
        modeling_zoo_checks.read_model_config(folder)
    assert isinstance(tz.ZooDecoderForCausalLM.from_pretrained(folder), tz.ZooDecoderForCausalLM)


def test_a_missing_folder_and_a_folder_without_config_are_named_by_the_zoo_readers(tmp_path):
    with pytest.raises(OSError, match="No such folder: .*nothing-here"):
        modeling_zoo_checks.read_model_config(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="has no config.json, so it is no folder save_pretrained wrote"):
        modeling_zoo_checks.read_model_config(tmp_path / "empty")


@pytest.mark.parametrize("layers, message", [
    (3, r"builds 3 layer\(s\) in model.layers, but the weights hold 2: layer\(s\) 2 start from random weights\. "
        "If the checkpoint is a 2-layer model, set num_hidden_layers=2 in its config.json"),
    (1, r"builds 1 layer\(s\) in model.layers, but the weights hold 2: the checkpoint's layer\(s\) 1 are not loaded"),
])
def test_a_layer_count_that_disagrees_with_the_weights_is_one_line(tmp_path, layers, message):
    """It loads, as in transformers (growing or cutting a model is a real use), and says so in one line."""
    from transformers import AutoModelForCausalLM

    folder = _saved_decoder(tmp_path / "model", num_hidden_layers=layers)
    with CaptureLogger(modeling_zoo_checks.logger) as captured:
        model = AutoModelForCausalLM.from_pretrained(folder)
    assert len(model.model.layers) == layers
    assert re.search(message, captured.out), captured.out
    with CaptureLogger(modeling_zoo_checks.logger) as matching:
        tz.ZooDecoderForCausalLM.from_pretrained(_saved_decoder(tmp_path / "intact"))
    assert "layer(s)" not in matching.out


def test_an_early_stopping_metric_typo_is_refused_before_the_corpus_is_read(tmp_path, capsys):
    from transformer_zoo.training.pretrain import recipe as pretraining

    missing_corpus = tmp_path / "not-read.txt"  # never opened: the metric is refused first
    with pytest.raises(SystemExit) as stop:
        pretraining.main(["--output_dir", str(tmp_path / "out"), "--dataset", str(missing_corpus),
                          "--early_stopping_metric", "eval_los", "--report_to", "none"])
    assert stop.value.code == 2
    assert re.search("--early_stopping_metric 'eval_los' is not reported by the --family .* evaluation; did you "
                     "mean 'eval_loss'", capsys.readouterr().err)
