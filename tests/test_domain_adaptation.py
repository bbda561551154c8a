"""Vocabulary extension (new rows = mean of the old pieces' rows; tied and untied output layers), the masked-position
MLM loss, LoRA mode, tiny end-to-end adaptations of each family, resuming, and from-scratch pretraining. The
downstream check's own tests are in tests/test_adaptation_downstream.py."""

import pytest
import torch
from adaptation_helpers import (
    ENGLISH,
    save_english_mlm,
    tiny_adaptation_flags,
    tiny_mlm,
    urdu_sentences,
    write_labelled_urdu,
    write_urdu_text,
)

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM
from transformer_zoo.text.tokenizer_stats import tokenizer_statistics
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
from transformer_zoo.training.adaptation.report import fine_tuning_name
from transformer_zoo.training.data.tokenization import train_tokenizer



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


def test_lora_targets_that_name_no_module_are_refused_before_the_data_loads(tmp_path, english_wordpiece,
                                                                            monkeypatch, capsys):
    """PEFT adapts whatever any listed name matches and says nothing of the others: `q_proj,value` would adapt the
    queries alone."""
    from transformer_zoo.training.adaptation import recipe as domain_adaptation

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
