"""Vocabulary extension (new rows = mean of the old pieces' rows; tied and untied output layers), the masked-position
MLM loss, LoRA mode, and a tiny end-to-end adaptation with a downstream check."""

import json
import random
from pathlib import Path

import pytest
import torch

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM, ZooEncoderConfig, ZooEncoderForMaskedLM
from transformer_zoo.text.tokenizer_stats import tokenizer_statistics
from transformer_zoo.training.adaptation.report import fine_tuning_name
from transformer_zoo.training.adaptation.recipe import (
    MaskedPositionsLM,
    apply_lora,
    build_parser,
    extend_tokenizer,
    main,
    old_pieces,
    resize_and_initialise,
    train_tokenizer_like,
)
from transformer_zoo.training.data.corpora import load_corpus
from transformer_zoo.training.data.tokenization import train_tokenizer


ENGLISH = ["the cat sat on the mat", "a dog ran in the park", "we read books at night", "she has a red hat",
           "they play in the sun", "it is a good day"] * 20
URDU_WORDS = ["کتاب", "پانی", "لڑکا", "لڑکی", "گھر", "اسکول", "دوست", "کھانا", "بازار", "شہر", "آسمان", "درخت",
              "ہے", "تھا", "میں", "نے", "کو", "کی", "کا", "اور"]


def urdu_sentences(count: int, seed: int = 0, words=URDU_WORDS) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 9))) + "۔" for _ in range(count)]


@pytest.fixture(scope="module")
def english_wordpiece():
    # English-only training text: every Urdu letter is unknown to this tokenizer.
    return train_tokenizer(ENGLISH, kind="wordpiece", vocab_size=120, show_progress=False)


def tiny_mlm(vocab_size: int) -> ZooEncoderForMaskedLM:
    torch.manual_seed(0)
    return ZooEncoderForMaskedLM(ZooEncoderConfig.from_preset("tiny", vocab_size=vocab_size, pad_token_id=0))


def save_english_mlm(folder, tokenizer):
    """A tiny English masked LM with its tokenizer, saved as the recipe's --model."""
    tiny_mlm(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_adaptation_flags(model_dir, data_file, output_dir, changes: dict[str, str]) -> list[str]:
    """The recipe's flags for a few steps of adaptation on tiny data, without the English sample or the downstream
    check, with `changes` (flag -> value) on top."""
    flags = {"--model": str(model_dir), "--dataset": str(data_file), "--output_dir": str(output_dir),
             "--max_train_paragraphs": "none", "--eval_paragraphs": "12", "--urdu_vocab_size": "200",
             "--min_frequency": "1", "--context_length": "32", "--per_device_batch_size": "8",
             "--learning_rate": "3e-3", "--eval_steps": "none", "--bpb_sentences": "4", "--curve_sentences": "3",
             "--english_dataset": "none", "--downstream": "false", "--progress_bar": "false", "--report_to": "none",
             **changes}
    return [item for flag_and_value in flags.items() for item in flag_and_value]


def write_urdu_text(path, paragraphs: int):
    """Unlabelled Urdu, one paragraph a line."""
    path.write_text("\n".join(" ".join(urdu_sentences(2, seed=i)) for i in range(paragraphs)) + "\n", encoding="utf-8")
    return path


def write_labelled_urdu(path, paragraphs: int):
    """Labelled Urdu JSONL: two classes with different word distributions (a learnable "which source" task)."""
    rows = [{"text": " ".join(urdu_sentences(2, seed=i, words=URDU_WORDS[:12] if i % 2 else URDU_WORDS[8:])),
             "label": "odd" if i % 2 else "even"} for i in range(paragraphs)]
    path.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ WordPiece
def test_old_pieces_follow_wordpiece_and_continuation_state(english_wordpiece):
    tokenizer = english_wordpiece
    vocab = tokenizer.get_vocab()
    model = tokenizer.backend_tokenizer.model
    for word in ("the", "cat", "books", "park"):
        # word-initial: exactly what the tokenizers library's WordPiece does
        assert old_pieces(tokenizer, word, "WordPiece") == [t.id for t in model.tokenize(word)]
    # continuation: '##' pieces only, greedy longest first, one unknown character -> one [UNK]
    expected = []
    rest = "ats"
    while rest:
        for end in range(len(rest), 0, -1):
            if "##" + rest[:end] in vocab:
                expected.append(vocab["##" + rest[:end]])
                rest = rest[end:]
                break
    assert old_pieces(tokenizer, "##ats", "WordPiece") == expected
    assert old_pieces(tokenizer, "cکt", "WordPiece") == [vocab["c"], tokenizer.unk_token_id, vocab["##t"]]


def test_extension_keeps_old_ids_and_lowers_fertility(english_wordpiece):
    urdu = urdu_sentences(200)
    trained = train_tokenizer_like(english_wordpiece, urdu, vocab_size=150, min_frequency=1)
    extension = extend_tokenizer(english_wordpiece, trained)
    extended = extension.tokenizer
    assert extension.kind == "WordPiece"
    assert extension.first_new_id == len(english_wordpiece)
    assert len(extended) == len(english_wordpiece) + len(extension.new_tokens)
    assert "##" + "ا" in extension.new_tokens or "ا" in extension.new_tokens
    # English encodes to the same ids as before (nothing old moved) ...
    for text in ("the cat sat", "books at night"):
        assert extended(text)["input_ids"] == english_wordpiece(text)["input_ids"]
    # ... and the special tokens stay where they were.
    assert extended.cls_token_id == english_wordpiece.cls_token_id and extended.mask_token_id == \
        english_wordpiece.mask_token_id
    held_out = urdu_sentences(30, seed=1)
    before = tokenizer_statistics(english_wordpiece, held_out)
    after = tokenizer_statistics(extended, held_out)
    assert before["unknown_word_share"] == 1.0  # every Urdu word is [UNK] for the English tokenizer
    assert after["unknown_share"] == 0.0
    assert after["fertility"] < 1.5
    # max_new_tokens caps the extension
    assert len(extend_tokenizer(english_wordpiece, trained, max_new_tokens=5).new_tokens) == 5


def test_new_rows_are_the_mean_of_old_pieces_with_tied_output(english_wordpiece):
    trained = train_tokenizer_like(english_wordpiece, ENGLISH[:6] + ["catsat dogpark hatsun"] * 5, vocab_size=140,
                                   min_frequency=1)
    extension = extend_tokenizer(english_wordpiece, trained)
    assert extension.new_tokens, "the trained tokenizer should add English merges such as 'catsat'"
    model = tiny_mlm(len(english_wordpiece))
    assert model.lm_head.decoder.weight is model.model.embed_tokens.weight
    with torch.no_grad():
        model.lm_head.decoder.bias.normal_()  # make the bias check meaningful
    old_embedding = model.model.embed_tokens.weight.detach().clone()
    old_bias = model.lm_head.decoder.bias.detach().clone()
    pieces = resize_and_initialise(model, extension, english_wordpiece).details["pieces"]

    new_size = len(extension.tokenizer)
    assert model.model.embed_tokens.weight.shape[0] == new_size
    assert model.lm_head.decoder.bias.shape[0] == new_size and model.config.vocab_size == new_size
    assert model.lm_head.decoder.weight is model.model.embed_tokens.weight  # still tied after the resize
    weight = model.model.embed_tokens.weight
    torch.testing.assert_close(weight[: len(english_wordpiece)], old_embedding, rtol=0, atol=0)
    vocab = english_wordpiece.get_vocab()
    for offset, token in enumerate(extension.new_tokens):
        row = extension.first_new_id + offset
        ids = pieces[token]
        torch.testing.assert_close(weight[row], old_embedding[ids].mean(0))
        torch.testing.assert_close(model.lm_head.decoder.bias[row], old_bias[ids].mean())
    # one case by hand: a merged word is the mean of its original pieces' rows
    if "catsat" in extension.new_tokens:
        row = extension.first_new_id + extension.new_tokens.index("catsat")
        hand = [vocab[p] for p in ("cat", "##sat")] if "##sat" in vocab else pieces["catsat"]
        torch.testing.assert_close(weight[row], old_embedding[hand].mean(0))
    # the output of the tied layer equals the input row for a new token
    hidden = torch.randn(1, model.config.hidden_size)
    logits = model.lm_head.decoder(hidden)
    row = extension.first_new_id
    torch.testing.assert_close(logits[0, row], hidden[0] @ weight[row] + model.lm_head.decoder.bias[row])


def test_untied_decoder_with_byte_level_bpe():
    english_bpe = train_tokenizer(ENGLISH, kind="bpe", vocab_size=300, show_progress=False)
    config = ZooDecoderConfig.from_preset("tiny", vocab_size=len(english_bpe), tie_word_embeddings=False,
                                          pad_token_id=english_bpe.pad_token_id)
    torch.manual_seed(0)
    model = ZooDecoderForCausalLM(config)
    assert model.lm_head.weight is not model.get_input_embeddings().weight
    old_input = model.get_input_embeddings().weight.detach().clone()
    old_output = model.lm_head.weight.detach().clone()
    urdu = urdu_sentences(200)
    trained = train_tokenizer_like(english_bpe, urdu, vocab_size=500, min_frequency=1)
    extension = extend_tokenizer(english_bpe, trained)
    assert extension.kind == "BPE" and extension.new_tokens
    pieces = resize_and_initialise(model, extension, english_bpe).details["pieces"]
    for offset, token in enumerate(extension.new_tokens):
        row = extension.first_new_id + offset
        assert len(pieces[token]) >= 2  # byte-level BPE spells a new Urdu token with 2+ old pieces
        torch.testing.assert_close(model.get_input_embeddings().weight[row], old_input[pieces[token]].mean(0))
        torch.testing.assert_close(model.lm_head.weight[row], old_output[pieces[token]].mean(0))
    extended = extension.tokenizer
    text = urdu_sentences(1, seed=5)[0]
    ids = extended(text)["input_ids"]
    assert extended.decode(ids) == text  # the appended merges still round-trip the text
    assert len(ids) < len(english_bpe(text)["input_ids"]) / 2
    assert max(ids) >= extension.first_new_id


def test_extension_refuses_a_slow_tokenizer():
    class Slow:
        is_fast = False

    with pytest.raises(ValueError, match="fast"):
        train_tokenizer_like(Slow(), ["ایک"], vocab_size=10)


# ------------------------------------------------------------------------------------------------ objective
def test_masked_positions_loss_equals_the_models_own_loss():
    model = tiny_mlm(97).eval()
    torch.manual_seed(1)
    input_ids = torch.randint(5, 97, (3, 11))
    labels = torch.full_like(input_ids, -100)
    chosen = torch.rand(input_ids.shape) < 0.3
    chosen[0, 0] = True
    labels[chosen] = input_ids[chosen]
    mask = torch.ones_like(input_ids)
    mask[2, 8:] = 0
    reference = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    sparse = MaskedPositionsLM(model)(input_ids=input_ids, attention_mask=mask, labels=labels).loss
    torch.testing.assert_close(sparse, reference)


def test_lora_mode_trains_adapters_new_rows_and_new_head():
    model = tiny_mlm(100)
    parser = build_parser()
    args = parser.parse_args(["--mode", "lora", "--lora_rank", "4"])
    peft_model = apply_lora(args, model, [95, 96, 97, 98, 99], new_head=True)
    trainable = {name for name, p in peft_model.named_parameters() if p.requires_grad}
    assert any("lora_A" in name for name in trainable)
    assert any("trainable_tokens_delta" in name for name in trainable)
    assert any(name.endswith("lm_head.dense.weight") for name in trainable)
    assert any(name.endswith("lm_head.decoder.token_adapter.base_layer.bias") for name in trainable)
    # the (tied) embedding matrix itself stays frozen: only the delta rows of the new tokens train
    assert not any(name.endswith("weight") and ("embed_tokens" in name or "decoder" in name) for name in trainable)
    input_ids = torch.randint(5, 100, (2, 9))
    labels = input_ids.clone()
    MaskedPositionsLM(peft_model)(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                  labels=labels).loss.backward()
    delta = next(p for name, p in peft_model.named_parameters() if "trainable_tokens_delta" in name)
    assert delta.shape == (5, model.config.hidden_size) and delta.grad is not None


def test_every_flag_is_documented():
    assert build_parser().undocumented_flags() == []


# ------------------------------------------------------------------------------------------------ end to end
def test_tiny_end_to_end_adaptation(tmp_path, english_wordpiece):
    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 240)
    output_dir = tmp_path / "adapted"
    results = main([
        "--model", str(model_dir), "--dataset", str(data_file), "--output_dir", str(output_dir),
        "--max_train_paragraphs", "none", "--eval_paragraphs", "24", "--urdu_vocab_size", "200",
        "--min_frequency", "1", "--context_length", "32", "--per_device_batch_size", "8", "--max_steps", "30",
        "--learning_rate", "3e-3", "--eval_steps", "15", "--save_steps", "15", "--logging_steps", "5",
        "--head_warmup_steps", "0", "--downstream_seeds", "1", "--downstream_train_examples", "48",
        "--downstream_validation_examples", "12", "--downstream_test_examples", "24", "--downstream_epochs", "1",
        "--downstream_eval_steps", "3", "--downstream_max_length", "32", "--downstream_batch_size", "8",
        "--bpb_sentences", "8", "--curve_sentences", "6", "--english_dataset", "none", "--word_l2r", "true",
        "--progress_bar", "false", "--report_to", "none",
    ])
    stats = results["tokenizer"]
    assert stats["original"]["unknown_word_share"] == 1.0 and "extended" in stats
    assert stats["extended"]["fertility"] < 1.5 and stats["extended"]["unknown_share"] == 0.0
    assert results["new_tokens"] > 0 and results["vocabulary_size"] == len(english_wordpiece) + results["new_tokens"]
    assert [point["step"] for point in results["curve"]] == [0, 15, 30]
    assert results["curve"][-1]["bits_per_byte"] < results["curve"][0]["bits_per_byte"]
    for name in ("unadapted", "adapted"):
        urdu = results[name]["urdu"]
        assert urdu["bits_per_byte"] > 0 and urdu["bits_per_byte_word_l2r"] > 0 and urdu["bytes_per_second"] > 0
    assert results["held_out_sentences"] == {"urdu": 8, "curve": 6}
    downstream = results["downstream"]["urdu"]
    assert [run["seed"] for run in downstream["adapted"]["runs"]] == [1]
    assert set(downstream) >= {"unadapted", "adapted", "comparison", "sizes", "majority_baseline"}
    assert downstream["comparison"]["spread"] is None and "spread is unknown" in downstream["comparison"]["verdict"]
    assert set(downstream["majority_baseline"]) == {"accuracy", "macro_f1"}
    from transformer_zoo.training.adaptation.downstream import native_bf16

    assert downstream["protocol"]["precision"] == ("bf16" if native_bf16(torch.device("cpu")) else "no")
    assert downstream["protocol"]["stopping_metric"] == "eval_loss"
    assert downstream["protocol"]["mode"] == build_parser().parse_args([]).downstream_mode
    report = (output_dir / "adaptation_report.md").read_text(encoding="utf-8")
    assert "early stopping on validation eval_loss" in report
    assert f"{fine_tuning_name(downstream['protocol'])} on the 6-class" in report
    assert "spread is unknown" in report and "± 0.000" not in report.split("Downstream")[1].split("|")[0]
    for name in ("README.md", "results.json", "tokenizer_stats.json", "tokenizer_stats.md", "adaptation_report.md",
                 "model.safetensors", "tokenizer.json"):
        assert (output_dir / name).is_file(), name
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert "supplied by the user" in card
    # the adapted folder reloads as a masked LM with the extended vocabulary
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    reloaded = AutoModelForMaskedLM.from_pretrained(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert reloaded.config.vocab_size == len(tokenizer) == results["vocabulary_size"]
    assert reloaded.lm_head.decoder.weight is reloaded.model.embed_tokens.weight


def test_bad_model_path_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--model", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "o")])
    assert "cannot load a config" in capsys.readouterr().err


def test_tiny_decoder_adaptation_with_lora_and_bpe(tmp_path):
    # A decoder continues with causal LM; its byte-level BPE gets Urdu merges; LoRA (+ new rows) is merged on save.
    english_bpe = train_tokenizer(ENGLISH, kind="bpe", vocab_size=300, show_progress=False)
    config = ZooDecoderConfig.from_preset("tiny", vocab_size=len(english_bpe), pad_token_id=english_bpe.pad_token_id,
                                          bos_token_id=english_bpe.bos_token_id,
                                          eos_token_id=english_bpe.eos_token_id)
    torch.manual_seed(0)
    model_dir = tmp_path / "decoder"
    ZooDecoderForCausalLM(config).save_pretrained(model_dir)
    english_bpe.save_pretrained(model_dir)
    data_file = write_urdu_text(tmp_path / "urdu.txt", 150)
    output_dir = tmp_path / "adapted"
    results = main([
        "--model", str(model_dir), "--dataset", str(data_file), "--output_dir", str(output_dir), "--mode", "lora",
        "--lora_target_modules", "q_proj,v_proj", "--max_train_paragraphs", "none", "--eval_paragraphs", "15",
        "--urdu_vocab_size", "400", "--min_frequency", "1", "--context_length", "32", "--per_device_batch_size", "8",
        "--max_steps", "12", "--learning_rate", "5e-3", "--eval_steps", "6", "--save_steps", "none",
        "--bpb_sentences", "6", "--curve_sentences", "4", "--english_dataset", "none",
        "--downstream", "false", "--progress_bar", "false", "--report_to", "none",
    ])
    assert results["objective"] == "clm" and results["downstream"] is None
    assert results["tokenizer"]["extended"]["fertility"] < results["tokenizer"]["original"]["fertility"] / 2
    assert results["curve"][-1]["bits_per_byte"] < results["curve"][0]["bits_per_byte"]
    assert "bits_per_byte_word_l2r" not in results["adapted"]["urdu"]  # exact bits per byte for a decoder
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(output_dir)
    assert reloaded.config.vocab_size == results["vocabulary_size"]
    assert not any("lora" in name for name, _ in reloaded.named_parameters())  # merged into plain weights


def test_a_token_without_old_pieces_starts_at_the_mean_of_all_rows():
    # SmolLM2's byte-level vocabulary lacks the byte symbols that never occur in UTF-8; an Urdu BPE trained on the
    # full byte alphabet adds them, and the old BPE model spells them with no piece at all.
    from transformer_zoo.training.adaptation.recipe import VocabularyExtension

    english_bpe = train_tokenizer(ENGLISH, kind="bpe", vocab_size=300, show_progress=False)
    assert old_pieces(english_bpe, "ک", "BPE") == []  # a raw Urdu letter is no symbol of a byte-level vocabulary

    class Sized:
        def __len__(self):
            return len(english_bpe) + 1

    model = ZooDecoderForCausalLM(ZooDecoderConfig.from_preset("tiny", vocab_size=len(english_bpe)))
    old_rows = model.get_input_embeddings().weight.detach().clone()
    extension = VocabularyExtension(Sized(), ["ک"], len(english_bpe), "BPE")
    resize_and_initialise(model, extension, english_bpe)
    torch.testing.assert_close(model.get_input_embeddings().weight[-1], old_rows.mean(0))
    assert torch.isfinite(model.get_input_embeddings().weight).all()


def test_tiny_seq2seq_adaptation_with_denoising(tmp_path):
    # An encoder-decoder continues with its own objective, span denoising, over the extended WordPiece vocabulary.
    from transformer_zoo import ZooSeq2SeqConfig, ZooSeq2SeqForConditionalGeneration

    english = train_tokenizer(ENGLISH, kind="wordpiece", vocab_size=120, show_progress=False)
    config = ZooSeq2SeqConfig.from_preset(
        "tiny", vocab_size=len(english), pad_token_id=english.pad_token_id,
        bos_token_id=english.cls_token_id, eos_token_id=english.sep_token_id,
        decoder_start_token_id=english.cls_token_id,
    )
    torch.manual_seed(0)
    model_dir = tmp_path / "seq2seq"
    ZooSeq2SeqForConditionalGeneration(config).save_pretrained(model_dir)
    english.save_pretrained(model_dir)
    data_file = write_urdu_text(tmp_path / "urdu.txt", 150)
    output_dir = tmp_path / "adapted"
    results = main([
        "--model", str(model_dir), "--dataset", str(data_file), "--output_dir", str(output_dir),
        "--max_train_paragraphs", "none", "--eval_paragraphs", "15", "--urdu_vocab_size", "400",
        "--min_frequency", "1", "--context_length", "32", "--per_device_batch_size", "8", "--max_steps", "12",
        "--learning_rate", "5e-3", "--eval_steps", "none", "--save_steps", "none", "--downstream", "false",
        "--progress_bar", "false", "--report_to", "none",
    ])
    assert results["objective"] == "denoising" and results["downstream"] is None
    # This English WordPiece spells every Urdu word as one [UNK]; the extended one knows them all.
    assert results["tokenizer"]["original"]["unknown_share"] > 0.9
    assert results["tokenizer"]["extended"]["unknown_share"] == 0
    assert results["unadapted"] is None  # span denoising has no bits per byte to compare the two models with
    assert results["adapted"]["urdu"]["eval_loss"] < results["adapted"]["urdu"]["eval_loss_before"]
    from transformers import AutoModelForSeq2SeqLM

    reloaded = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    assert reloaded.config.vocab_size == results["vocabulary_size"]
    # The shared embedding and the tied output layer grew together.
    assert reloaded.get_output_embeddings().weight.data_ptr() == reloaded.get_input_embeddings().weight.data_ptr()


def test_resumed_adaptation_ends_with_the_same_weights(tmp_path, english_wordpiece):
    """--resume reuses the extended tokenizer the run began with (retraining would not give the same ids) and the
    saved 'before' loss, and continues from the checkpoint: cut back to its step-4 checkpoint and resumed, a run ends
    bit-identical to how it ended uninterrupted."""
    import shutil

    from safetensors.torch import load_file

    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_urdu_text(tmp_path / "urdu.txt", 120)
    output_dir = tmp_path / "run"
    common = tiny_adaptation_flags(model_dir, data_file, output_dir,
                                   {"--max_steps": "10", "--save_steps": "4", "--save_total_limit": "0"})
    uninterrupted = main(common)
    expected = load_file(output_dir / "model.safetensors")
    for later in sorted((output_dir / "checkpoints").iterdir())[1:]:  # as if it had died between steps 4 and 8
        shutil.rmtree(later)
    (output_dir / "model.safetensors").unlink()
    resumed = main([*common, "--resume"])
    actual = load_file(output_dir / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    assert resumed["curve"] == uninterrupted["curve"]
    assert resumed["adapted"]["urdu"]["bits_per_byte"] == uninterrupted["adapted"]["urdu"]["bits_per_byte"]
    assert resumed["unadapted"]["urdu"]["bits_per_byte"] == uninterrupted["unadapted"]["urdu"]["bits_per_byte"]


def test_downstream_precision_resolves_auto_and_refuses_a_contradiction(monkeypatch):
    from types import SimpleNamespace

    from transformer_zoo.training import adaptation_downstream as downstream

    plain = SimpleNamespace(mixed_precision="no", device=torch.device("cpu"))
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert downstream.downstream_precision("auto", plain) == "bf16"
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert downstream.downstream_precision("auto", plain) == "no"  # emulated bf16 would be slower than fp32
    assert downstream.downstream_precision("bf16", plain) == "bf16"  # asked for explicitly
    whole_run = SimpleNamespace(mixed_precision="bf16", device=torch.device("cpu"))
    assert downstream.downstream_precision("auto", whole_run) == "bf16"
    with pytest.raises(ValueError, match="cannot undo --mixed_precision bf16"):
        downstream.downstream_precision("no", whole_run)
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with downstream.precision_context("bf16", plain):
        assert (a @ b).dtype == torch.bfloat16
    with downstream.precision_context("no", plain):
        assert (a @ b).dtype == torch.float32
    with downstream.precision_context("bf16", whole_run):  # the run's accelerator applies its own autocast
        assert (a @ b).dtype == torch.float32
    # Training inside one context that spans many steps: every forward sees the updated weights (autocast's weight
    # cache would otherwise keep the first step's bf16 copy for the whole fine-tune).
    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 3)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    with downstream.precision_context("bf16", plain):
        outputs = []
        for _ in range(3):
            out = layer(a)
            outputs.append(out.detach().float())
            out.square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        # The current weights, in bf16: inputs and weights rounded to 8 significant bits differ from the fp32 product
        # by about 8 terms x |a||w| x 2^-8 (~0.01 here), so 0.05 separates "current weights" from "first step's".
        expected = (a @ layer.weight.detach().T + layer.bias.detach()).to(torch.bfloat16).float()
        assert torch.allclose(layer(a).float(), expected, atol=0.05, rtol=0.02)
    assert not torch.allclose(outputs[0], outputs[-1])


@pytest.mark.parametrize("launch", ["two_processes", "bf16"])
def test_launched_adaptation_with_downstream_check(launch, tmp_path, english_wordpiece):
    """`accelerate launch --multi_gpu --num_processes 2` (gloo on CPUs), or one process under bf16 autocast: the whole
    recipe, downstream check included, ends with one adapted folder whose held-out loss fell."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 160)
    output_dir = tmp_path / "adapted"
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch",
         *(["--multi_gpu", "--num_processes", "2"] if launch == "two_processes" else ["--num_processes", "1", "--cpu"]),
         "--num_machines", "1", "--mixed_precision", "no" if launch == "two_processes" else "bf16", "--dynamo_backend",
         "no", str(root / "recipes" / "domain_adapt.py"), "--mixed_precision", "no" if launch == "two_processes" else
         "bf16",
         "--model", str(model_dir), "--dataset", str(data_file), "--output_dir", str(output_dir),
         "--max_train_paragraphs", "none", "--eval_paragraphs", "16", "--urdu_vocab_size", "200", "--min_frequency",
         "1", "--context_length", "32", "--per_device_batch_size", "4", "--max_steps", "8", "--learning_rate", "3e-3",
         "--eval_steps", "8", "--save_steps", "none", "--head_warmup_steps", "0", "--downstream_seeds", "1",
         "--downstream_train_examples", "32", "--downstream_validation_examples", "8", "--downstream_test_examples",
         "16", "--downstream_epochs", "1", "--downstream_eval_steps", "4", "--downstream_max_length", "32",
         "--downstream_batch_size", "4", "--bpb_sentences", "4", "--curve_sentences", "3", "--english_dataset",
         "none", "--progress_bar", "false", "--report_to", "none"],
        check=True, env=env, timeout=600,
    )
    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    assert results["curve"][-1]["bits_per_byte"] < results["curve"][0]["bits_per_byte"]
    assert results["downstream"]["urdu"]["adapted"]["runs"][0]["seed"] == 1
    assert (output_dir / "model.safetensors").is_file() and (output_dir / "README.md").is_file()


def test_downstream_fine_tunes_in_parallel_processes_match_one_at_a_time(tmp_path, english_wordpiece):
    """--downstream_jobs 2 runs the fine-tunes two at a time, one thread each, in spawned processes; each seeds
    itself, so they give exactly what one-thread fine-tunes give one after the other."""
    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 160)
    common = [
        "--model", str(model_dir), "--dataset", str(data_file), "--adapt", "false", "--measure_unadapted", "false",
        "--downstream_models", "unadapted", "--downstream_seeds", "1,2", "--downstream_train_examples", "48",
        "--downstream_validation_examples", "12", "--downstream_test_examples", "24", "--downstream_epochs", "1",
        "--downstream_eval_steps", "3", "--downstream_max_length", "32", "--downstream_batch_size", "8",
        "--bpb_sentences", "8", "--curve_sentences", "6", "--english_dataset", "none", "--progress_bar", "false",
        "--report_to", "none",
    ]
    threads = torch.get_num_threads()
    try:
        parallel = main(common + ["--output_dir", str(tmp_path / "parallel"), "--cpu_threads", "2",
                                  "--downstream_jobs", "2"])["downstream"]["urdu"]
        serial = main(common + ["--output_dir", str(tmp_path / "serial"), "--cpu_threads", "1",
                                "--downstream_jobs", "auto"])["downstream"]["urdu"]
    finally:
        torch.set_num_threads(threads)
    assert parallel["execution"] == {"fine_tunes_at_once": 2, "threads_per_fine_tune": 1}
    assert serial["execution"] == {"fine_tunes_at_once": 1, "threads_per_fine_tune": 1}  # auto: one thread, serial
    keys = ("seed", "steps", "best_step", "accuracy", "macro_f1")
    assert [{k: run[k] for k in keys} for run in parallel["unadapted"]["runs"]] == \
        [{k: run[k] for k in keys} for run in serial["unadapted"]["runs"]]
    assert [run["seed"] for run in parallel["unadapted"]["runs"]] == [1, 2]
    for seed in (1, 2):  # each worker wrote its own run's folder
        assert (tmp_path / "parallel" / "downstream" / "urdu" / "unadapted" / f"seed-{seed}" / "results.json").is_file()


def test_downstream_jobs_flag_refuses_nonsense():
    from transformer_zoo.training.adaptation.arguments import build_parser as adaptation_parser

    with pytest.raises(SystemExit):
        adaptation_parser().parse_args(["--downstream_jobs", "0"])
    assert adaptation_parser().parse_args(["--downstream_jobs", "3"]).downstream_jobs == 3


@pytest.mark.parametrize("count, seed", [(36, 1), (500, 0), (12, 7)])
def test_stratified_subset_is_datasets_own_stratified_split_row_for_row(count, seed):
    """stratified_subset reads the labels in one batch instead of datasets' row-at-a-time read; the rows drawn must be
    train_test_split's, also on a dataset reordered by an indices mapping."""
    import datasets

    from transformer_zoo.training.adaptation.data import stratified_subset

    corpus = load_corpus("hadith-ur", seed=0)
    for dataset in (corpus["validation"], corpus["validation"].shuffle(seed=5).select(range(2000))):
        reference = dataset.train_test_split(test_size=count, stratify_by_column="label", seed=seed)["test"]
        subset = stratified_subset(dataset, count, seed)
        assert subset["text"] == reference["text"] and subset["label"] == reference["label"]
    assert stratified_subset(corpus["validation"], None, seed) is corpus["validation"]
    lonely = datasets.Dataset.from_dict({"text": list("abcde"), "label": [0, 0, 1, 1, 2]},
                                        features=datasets.Features({"text": datasets.Value("string"),
                                                                    "label": datasets.ClassLabel(num_classes=3)}))
    with pytest.raises(ValueError, match="at least 2 rows of every label"):
        stratified_subset(lonely, 3, seed)
    with pytest.raises(ValueError, match="ClassLabel"):
        stratified_subset(lonely.cast_column("label", datasets.Value("int64")), 3, seed)


def test_lora_targets_that_name_no_module_are_refused_before_the_data_loads(tmp_path, english_wordpiece,
                                                                            monkeypatch, capsys):
    """PEFT adapts whatever any listed name matches and says nothing of the others: `q_proj,value` would adapt the
    queries alone."""
    from transformer_zoo.training import domain_adaptation

    def read_data(args):
        raise AssertionError("the data was read before --lora_target_modules was checked")

    monkeypatch.setattr(domain_adaptation, "load_urdu_data", read_data)
    model_dir = save_english_mlm(tmp_path / "mlm", english_wordpiece)
    with pytest.raises(SystemExit) as raised:
        main(["--model", str(model_dir), "--dataset", str(tmp_path / "urdu.txt"), "--output_dir", str(tmp_path / "out"),
              "--mode", "lora", "--lora_target_modules", "q_proj,value", "--downstream", "false",
              "--report_to", "none"])
    assert raised.value.code == 2
    assert ("--lora_target_modules value: no module of the model has that name, so no adapter would train there; "
            "the model's linear layers are named ") in capsys.readouterr().err


def test_from_scratch_uses_the_adapted_tokenizer_and_none_of_the_checkpoints_weights(tmp_path, english_wordpiece,
                                                                                      capsys):
    """--from_scratch: the architecture and extended tokenizer of an adapted run, every weight drawn afresh."""
    from transformers import AutoModelForMaskedLM

    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 120)
    common = ["--model", str(model_dir), "--dataset", str(data_file), "--max_train_paragraphs", "none",
              "--eval_paragraphs", "12", "--urdu_vocab_size", "200", "--min_frequency", "1", "--context_length", "32",
              "--per_device_batch_size", "8", "--max_steps", "2", "--eval_steps", "2", "--save_steps", "none",
              "--head_warmup_steps", "0", "--downstream", "false", "--bpb_sentences", "4", "--curve_sentences", "3",
              "--english_dataset", "none", "--measure_unadapted", "false", "--progress_bar", "false",
              "--report_to", "none", "--mode", "full", "--learning_rate", "1e-12"]
    adapted = main(common + ["--output_dir", str(tmp_path / "adapted")])
    scratch = main(common + ["--output_dir", str(tmp_path / "scratch"), "--from_scratch", "true"])
    assert scratch["from_scratch"] and scratch["embedding_init"] is None and adapted["embedding_init"] == "mean"
    assert scratch["vocabulary_size"] == adapted["vocabulary_size"] > len(english_wordpiece)
    # the same extension (its trainer breaks ties between equally frequent pairs differently run to run, so the
    # pieces themselves may differ by a few: vocabulary_extension's note)
    assert scratch["new_tokens"] == adapted["new_tokens"] > 0
    assert scratch["tokenizer"]["extended"]["fertility"] == pytest.approx(adapted["tokenizer"]["extended"]["fertility"],
                                                                          rel=0.05)
    source = AutoModelForMaskedLM.from_pretrained(model_dir).state_dict()
    with_rate_0 = {"adapted": AutoModelForMaskedLM.from_pretrained(tmp_path / "adapted").state_dict(),
                   "scratch": AutoModelForMaskedLM.from_pretrained(tmp_path / "scratch").state_dict()}
    # a learning rate of 1e-12: the adapted run still holds the checkpoint's weights, the scratch run none of them
    names = [key for key in source if key.endswith(".weight") and "embed" not in key and "lm_head" not in key]
    assert names
    for name in names:
        assert torch.allclose(with_rate_0["adapted"][name], source[name], atol=1e-6), name
        assert not torch.allclose(with_rate_0["scratch"][name], source[name], atol=1e-3) or \
            torch.all(source[name] == source[name].flatten()[0]), name  # (a constant init, e.g. a norm's ones)
    card = (tmp_path / "scratch" / "README.md").read_text(encoding="utf-8")
    assert "from scratch" in card.lower()
    with pytest.raises(SystemExit):
        main(common[:-4] + ["--output_dir", str(tmp_path / "lora"), "--from_scratch", "true", "--mode", "lora"])
    assert "--from_scratch true pretrains random weights: it needs --mode full" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ resuming a check
def _resumable_check_flags(model_dir, data_file, output_dir) -> list[str]:
    return tiny_adaptation_flags(model_dir, data_file, output_dir, {
        "--max_steps": "6", "--save_steps": "3", "--head_warmup_steps": "0", "--downstream": "true",
        "--downstream_seeds": "1,2", "--downstream_jobs": "1", "--downstream_train_examples": "48",
        "--downstream_validation_examples": "12", "--downstream_test_examples": "24", "--downstream_epochs": "2",
        "--downstream_eval_steps": "2", "--downstream_patience": "10", "--downstream_save_steps": "2",
        "--downstream_max_length": "32", "--downstream_batch_size": "8"})


def test_a_cut_off_downstream_check_resumes_to_the_numbers_of_an_uncut_one(tmp_path, english_wordpiece, monkeypatch):
    """--downstream_save_steps checkpoints every fine-tune; a run cut off in its third fine-tune (as a kill would
    leave it: a checkpoint, a best model, metrics past the checkpoint) and resumed reads the two finished
    fine-tunes back, continues the third from its checkpoint and runs the fourth: the numbers are the uncut run's."""
    from transformer_zoo.training.finetune import recipe as finetuning

    model_dir = save_english_mlm(tmp_path / "english-model", english_wordpiece)
    data_file = write_labelled_urdu(tmp_path / "urdu.jsonl", 240)
    uncut = main(_resumable_check_flags(model_dir, data_file, tmp_path / "uncut"))["downstream"]["urdu"]

    class Cut(Exception):
        pass

    real_train, started = finetuning.train, []

    def train_cut_in_the_third(model, train_set, collate, config, eval_fn=None, **kwargs):
        started.append(config.output_dir)
        if len(started) != 3:
            return real_train(model, train_set, collate, config, eval_fn=eval_fn, **kwargs)
        evaluations = []

        def evaluate_until_the_cut(current):
            evaluations.append(1)
            if len(evaluations) == 4:  # step 8: after the step-6 checkpoint, before the step-8 one
                raise Cut
            return eval_fn(current)

        return real_train(model, train_set, collate, config, eval_fn=evaluate_until_the_cut, **kwargs)

    cut_dir = tmp_path / "cut"
    monkeypatch.setattr(finetuning, "train", train_cut_in_the_third)
    with pytest.raises(Cut):
        main(_resumable_check_flags(model_dir, data_file, cut_dir))
    monkeypatch.setattr(finetuning, "train", real_train)
    third = cut_dir / "downstream" / "urdu" / "adapted" / "seed-1"
    assert [path.name for path in (third / "checkpoints").iterdir()] == ["checkpoint-00000006"]
    assert not (third / "results.json").exists()
    finished = {name: (cut_dir / "downstream" / "urdu" / "unadapted" / name / "results.json").stat().st_mtime_ns
                for name in ("seed-1", "seed-2")}
    before_the_cut = [line for line in (third / "metrics.jsonl").read_text().splitlines()
                      if json.loads(line)["step"] <= 6]

    evaluated = {}  # fine-tune folder -> evaluations made in the resumed run

    def train_counting_evaluations(model, train_set, collate, config, eval_fn=None, **kwargs):
        folder = (Path(config.output_dir).parent.name, Path(config.output_dir).name)

        def counted(current):
            evaluated[folder] = evaluated.get(folder, 0) + 1
            return eval_fn(current)

        return real_train(model, train_set, collate, config, eval_fn=counted, **kwargs)

    monkeypatch.setattr(finetuning, "train", train_counting_evaluations)
    resumed = main([*_resumable_check_flags(model_dir, data_file, cut_dir), "--resume"])["downstream"]["urdu"]
    # The third went on from step 6 (evaluations at 8, 10, 12 of 12 steps); the fourth ran whole.
    assert evaluated == {("adapted", "seed-1"): 3, ("adapted", "seed-2"): 6}
    for name, written in finished.items():  # read back, not fine-tuned again
        assert (cut_dir / "downstream" / "urdu" / "unadapted" / name / "results.json").stat().st_mtime_ns == written
    steps_logged = [json.loads(line)["step"] for line in (third / "metrics.jsonl").read_text().splitlines()
                    if '"split"' in line]
    assert steps_logged == sorted(set(steps_logged))  # continued from step 6: no evaluation logged twice
    # The records up to the checkpoint are the cut attempt's own (wall-clock times included): not a fresh start.
    assert (third / "metrics.jsonl").read_text().splitlines()[:len(before_the_cut)] == before_the_cut
    for name in ("unadapted", "adapted"):
        assert resumed[name]["runs"] == [
            {**run, "train_seconds": resumed_run["train_seconds"]}
            for run, resumed_run in zip(uncut[name]["runs"], resumed[name]["runs"])], name
        assert resumed[name]["accuracy"] == uncut[name]["accuracy"]


def test_resuming_a_fine_tune_made_with_other_flags_is_refused(tmp_path):
    from types import SimpleNamespace

    from transformer_zoo.training.adaptation.downstream import finished_fine_tunes

    def job(rate, progress_bar=True):
        return ("adapted", SimpleNamespace(learning_rate=rate, num_epochs=8.0, progress_bar=progress_bar,
                                           save_steps=50, resume=False), 1)

    assert finished_fine_tunes([job(1e-4)], tmp_path, resume=False, write=True) == {}
    recorded = tmp_path / "adapted" / "seed-1" / "fine_tune_args.json"
    assert json.loads(recorded.read_text())["learning_rate"] == 1e-4
    # Not finished: resumed (flags that do not change the numbers may differ).
    assert finished_fine_tunes([job(1e-4, progress_bar=False)], tmp_path, resume=True, write=True) == {}
    (tmp_path / "adapted" / "seed-1" / "results.json").write_text('{"seed": 1}')
    assert finished_fine_tunes([job(1e-4)], tmp_path, resume=True, write=True) == {0: {"seed": 1}}
    with pytest.raises(ValueError, match="learning_rate: 0.0001 then, 0.0002 now"):
        finished_fine_tunes([job(2e-4)], tmp_path, resume=True, write=True)
    assert finished_fine_tunes([job(2e-4)], tmp_path, resume=False, write=True) == {}  # a fresh start overwrites


def test_a_resume_before_the_first_checkpoint_fits_the_new_head_again(tmp_path, english_wordpiece):
    """A checkpoint without an MLM head (a sentence-embedding BERT) gets its head fitted first. A run cut off before
    its first adaptation checkpoint has no fitted head to resume: --resume must fit it again, or the adapted model
    would differ from an uncut run's."""
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    backbone_dir = tmp_path / "bert-backbone"
    BertModel(BertConfig(vocab_size=len(english_wordpiece), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
              ).save_pretrained(backbone_dir)
    english_wordpiece.save_pretrained(backbone_dir)
    data_file = write_urdu_text(tmp_path / "urdu.txt", 60)
    output_dir = tmp_path / "run"
    common = tiny_adaptation_flags(backbone_dir, data_file, output_dir,
                                   {"--max_steps": "4", "--save_steps": "none", "--head_warmup_steps": "3"})
    uncut = main(common)
    expected = load_file(output_dir / "model.safetensors")
    resumed = main([*common, "--resume"])  # no checkpoint was ever written (--save_steps none)
    actual = load_file(output_dir / "model.safetensors")
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    assert resumed["adapted"]["urdu"]["bits_per_byte"] == uncut["adapted"]["urdu"]["bits_per_byte"]
