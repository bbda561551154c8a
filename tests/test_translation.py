"""Translation pieces (transformer_zoo.translation, the parallel corpora, scripts/translate.py and
scripts/average_checkpoints.py): checkpoint averaging against hand-computed means, token-count batches, the
retrieval and copy baselines, sacreBLEU wiring against the library's own numbers, batched beam search against one
sentence at a time, split de-duplication, and the command lines."""

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from transformer_zoo import ZooSeq2SeqConfig, ZooSeq2SeqForConditionalGeneration
from transformer_zoo.training.data.corpora import corpus_card_info, load_corpus
from transformer_zoo.training.data.parallel_corpora import SWORD_ROOT, bible_pairs, osis_to_text
from transformer_zoo.training.data.tokenization import train_tokenizer
from transformer_zoo.translation import (RetrievalBaseline, average_checkpoints, average_state_dicts,
                                         copy_baseline, corpus_scores, token_batches, translate)
from transformer_zoo.translation.training import encode_pairs, evaluate_loss, train_translation

REPO = Path(__file__).resolve().parents[1]
HAVE_BIBLES = (SWORD_ROOT / "engKJV2006eb" / "ot.bzv").is_file() and (SWORD_ROOT / "spaRV1909eb" / "ot.bzv").is_file()
needs_bibles = pytest.mark.skipif(not HAVE_BIBLES, reason="the Debian packages sword-text-kjv and sword-text-sparv "
                                  "are not installed (scripts/install.sh installs them where it may run apt-get)")


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------ averaging
def test_average_of_two_known_state_dicts():
    first = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.tensor([0.5], dtype=torch.bfloat16),
             "ids": torch.arange(3)}
    second = {"w": torch.tensor([[3.0, 2.0], [-3.0, 0.0]]), "b": torch.tensor([1.5], dtype=torch.bfloat16),
              "ids": torch.arange(3)}
    averaged = average_state_dicts([first, second])
    assert torch.equal(averaged["w"], torch.tensor([[2.0, 2.0], [0.0, 2.0]]))
    assert averaged["b"].dtype == torch.bfloat16 and float(averaged["b"]) == 1.0
    assert torch.equal(averaged["ids"], torch.arange(3))  # integer buffers are copied, not averaged
    # float64 accumulation: float32 sums would lose the 1 next to 1e8 (spacing 8 there) and give 8 / 3
    values = [torch.tensor([1e8]), torch.tensor([1.0]), torch.tensor([-99999992.0])]
    assert float(average_state_dicts([{"x": v} for v in values])["x"]) == 3.0


def test_averaging_refuses_mismatched_checkpoints():
    with pytest.raises(ValueError, match="different tensors"):
        average_state_dicts([{"a": torch.zeros(1)}, {"b": torch.zeros(1)}])
    with pytest.raises(ValueError, match="shape"):
        average_state_dicts([{"a": torch.zeros(1)}, {"a": torch.zeros(2)}])
    with pytest.raises(ValueError, match="integer tensors cannot be averaged"):
        average_state_dicts([{"a": torch.tensor([1])}, {"a": torch.tensor([2])}])
    with pytest.raises(ValueError, match="at least one"):
        average_state_dicts([])


def test_average_checkpoints_reads_safetensors_only(tmp_path):
    for step, value in ((100, 1.0), (200, 2.0), (300, 6.0)):
        folder = tmp_path / f"step-{step}"
        folder.mkdir()
        save_file({"w": torch.full((2,), value)}, str(folder / "model.safetensors"), metadata={"format": "pt"})
        (folder / "config.json").write_text("{}")
    state, metadata = average_checkpoints([tmp_path / "step-100", tmp_path / "step-300"])
    assert torch.equal(state["w"], torch.full((2,), 3.5)) and metadata["format"] == "pt"
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    torch.save({"w": torch.zeros(1)}, pickled / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pickled"):
        average_checkpoints([pickled])
    with pytest.raises(ValueError, match="listed twice"):
        average_checkpoints([tmp_path / "step-100", tmp_path / "step-100"])

    script = load_script("average_checkpoints")
    # Folders are ordered by step number: --last 2 takes step-200 and step-300 whatever the argument order.
    out = tmp_path / "averaged"
    assert script.main([str(tmp_path / "step-300"), str(tmp_path / "step-100"), str(tmp_path / "step-200"),
                        "--last", "2", "--output", str(out)]) == 0
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(out / "model.safetensors"))["w"], torch.full((2,), 4.0))
    assert (out / "config.json").is_file()
    assert json.loads((out / "averaged_from.json").read_text())["checkpoints"][-1].endswith("step-300")
    assert script.main([str(pickled), "--output", str(tmp_path / "x")]) == 2
    assert script.main([str(tmp_path / "step-100"), "--last", "3", "--output", str(tmp_path / "y")]) == 2


# ------------------------------------------------------------------------------------------------ batching
def test_token_batches_respect_the_budget_and_cover_every_pair():
    import numpy as np

    rng = np.random.default_rng(0)
    source, target = rng.integers(1, 60, 500).tolist(), rng.integers(1, 60, 500).tolist()
    batches = token_batches(source, target, 256, seed=3)
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    for batch in batches:
        assert max(max(source[i], target[i]) for i in batch) * len(batch) <= 256
    assert token_batches(source, target, 256, seed=3) == batches  # deterministic for a seed
    assert token_batches(source, target, 256, seed=4) != batches
    fixed = token_batches(source, target, 256, seed=None)
    widths = [max(max(source[i], target[i]) for i in batch) for batch in fixed]
    assert widths == sorted(widths)  # evaluation order: sorted by length, padding minimal
    with pytest.raises(ValueError, match="more than max_tokens"):
        token_batches([10, 300], [5, 5], 256)
    with pytest.raises(ValueError, match="equally long"):
        token_batches([1, 2], [1], 256)


# ------------------------------------------------------------------------------------------------ baselines, scores
def test_retrieval_baseline_returns_the_target_of_the_nearest_source():
    sources = ["the cat sat on the mat", "a dog ran in the park", "birds fly south in winter"]
    targets = ["el gato", "el perro", "los pajaros"]
    baseline = RetrievalBaseline(sources, targets)
    assert baseline.nearest(["the dog ran in a park today", "winter birds", "a cat on a mat"]) == [1, 2, 0]
    assert baseline.translate(["birds in winter fly"]) == ["los pajaros"]
    assert copy_baseline(["same text"]) == ["same text"]
    with pytest.raises(ValueError, match="targets"):
        RetrievalBaseline(["a"], [])


def test_corpus_scores_are_sacrebleus_own_numbers():
    import sacrebleu

    hypotheses = ["The cat is on the mat.", "There is a dog in the garden today."]
    references = ["The cat sat on the mat.", "A dog is in the garden."]
    scores = corpus_scores(hypotheses, references)
    assert scores["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert 0 < scores["bleu"] < 100 and scores["sentences"] == 2
    assert scores["bleu_signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    assert corpus_scores(references, references)["bleu"] == pytest.approx(100.0)
    # By hand: "a b c d" against "a b c e": n-gram precisions 3/4, 2/3, 1/2 and 0/1, which sacreBLEU's default
    # exponential smoothing turns into 1 / (2 * 1); equal lengths, so no brevity penalty: 100 * (1/8) ** (1/4).
    assert corpus_scores(["a b c d"], ["a b c e"])["bleu"] == pytest.approx(100 * 0.125 ** 0.25, rel=1e-12)
    with pytest.raises(ValueError, match="pair up"):
        corpus_scores(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="lists of sentences"):
        corpus_scores("a", "a")


# ------------------------------------------------------------------------------------------------ model pieces
@pytest.fixture(scope="module")
def tiny_translator():
    texts = ["the cat sat on the mat", "el gato se sento", "a dog ran", "un perro corrio", "birds fly",
             "los pajaros vuelan"] * 20
    tokenizer = train_tokenizer(texts, kind="bpe", vocab_size=300, show_progress=False)
    config = ZooSeq2SeqConfig(vocab_size=len(tokenizer), hidden_size=32, encoder_layers=1, decoder_layers=1,
                              num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                              pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                              eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id)
    torch.manual_seed(0)
    model = ZooSeq2SeqForConditionalGeneration(config)
    # Trained a little, so that it ends its outputs with eos (a random model runs to the length limit, which is set
    # per batch and would make batched and single outputs differ in length only).
    features = encode_pairs(tokenizer, TOY_SOURCES * 8, TOY_TARGETS * 8, 16)
    train_translation(model, features, steps=200, max_tokens=64, learning_rate=1e-2, warmup_steps=10, progress=False)
    return model.eval(), tokenizer


TOY_SOURCES, TOY_TARGETS = ["the cat sat", "a dog ran", "birds fly"], ["el gato", "un perro", "los pajaros"]


def test_batched_beam_search_equals_one_sentence_at_a_time(tiny_translator):
    # float64: padding changes how the sums round, and in float32 a near-tie between two beams could then flip on
    # another CPU; the claim is that batching changes nothing but rounding.
    model, tokenizer = copy.deepcopy(tiny_translator[0]).double(), tiny_translator[1]
    sources = ["the cat sat", "a dog ran on the mat and the cat sat", "birds", "el gato"]
    batched = translate(model, tokenizer, sources, num_beams=3, batch_size=3, extra_length=6)
    single = [translate(model, tokenizer, [s], num_beams=3, batch_size=1, extra_length=6)[0] for s in sources]
    assert batched[0] == "el gato" and batched[2] != batched[0]  # it learned the toy pairs
    assert batched == single  # order restored after length sorting; padding changes nothing
    end = tokenizer.eos_token_id
    ids = tokenizer(sources[1], add_special_tokens=False)["input_ids"] + [end]
    direct = model.generate(input_ids=torch.tensor([ids]), num_beams=3, max_new_tokens=len(ids) + 6,
                            length_penalty=0.6, do_sample=False, early_stopping=True)
    assert batched[1] == tokenizer.decode(direct[0], skip_special_tokens=True).strip()
    with pytest.raises(ValueError, match="list of sentences"):
        translate(model, tokenizer, "one string")
    # a negative extra_length asks for outputs shorter than their sources, down to nothing left
    shorter = translate(model, tokenizer, sources[1:2], num_beams=3, extra_length=-len(ids) + 2)
    assert len(tokenizer(shorter[0], add_special_tokens=False)["input_ids"]) <= 2
    with pytest.raises(ValueError, match="leaves no room for an output"):
        translate(model, tokenizer, sources, extra_length=-1000)


def test_a_source_past_the_position_limit_is_translated_in_pieces_of_whole_sentences(tiny_translator):
    """With a sentence splitter, a source longer than the limit is not truncated: its sentences are grouped into
    pieces that fit, each piece translated as a source of its own, the translations joined in order; the other
    sources are untouched and every output keeps its place. Without one, the source is truncated and counted."""
    model, tokenizer = copy.deepcopy(tiny_translator[0]).double(), tiny_translator[1]
    sentences = ["the cat sat", "a dog ran", "birds fly"]
    lengths = [len(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in sentences]
    limit = max(lengths) + 1  # one sentence and its eos fit; two do not
    assert min(a + b for a, b in zip(lengths, lengths[1:])) + 1 > limit
    long_source = " | ".join(sentences)

    def split_at_bars(text):
        return [part.strip() for part in text.split("|")]

    counts = {}
    outputs = translate(model, tokenizer, ["birds fly", long_source, "a dog ran"], num_beams=3, batch_size=2,
                        max_source_tokens=limit, extra_length=6, split_sentences=split_at_bars, counts=counts)
    one_by_one = translate(model, tokenizer, sentences, num_beams=3, batch_size=1, max_source_tokens=limit,
                           extra_length=6)
    assert one_by_one[0] == "el gato" and outputs[1] == " ".join(one_by_one)
    assert (outputs[0], outputs[2]) == (one_by_one[2], one_by_one[1])
    assert counts == {"over_limit": 1, "split": 1, "pieces": 3, "truncated": 0}
    truncated_counts = {}
    truncated = translate(model, tokenizer, [long_source], num_beams=3, max_source_tokens=limit, extra_length=6,
                          counts=truncated_counts)
    assert truncated_counts == {"over_limit": 1, "split": 0, "pieces": 0, "truncated": 1}
    assert truncated[0] != outputs[1]
    # A source with a single sentence past the limit stays whole, truncated, and counted as such.
    single_counts = {}
    translate(model, tokenizer, [" ".join(sentences)], num_beams=1, max_source_tokens=limit,
              split_sentences=split_at_bars, counts=single_counts)
    assert single_counts == {"over_limit": 1, "split": 0, "pieces": 0, "truncated": 1}


def test_train_translation_learns_and_averages(tiny_translator):
    _, tokenizer = tiny_translator
    torch.manual_seed(1)
    model = ZooSeq2SeqForConditionalGeneration(tiny_translator[0].config)
    sources, targets = TOY_SOURCES * 8, TOY_TARGETS * 8
    features = encode_pairs(tokenizer, sources, targets, 16)
    before = evaluate_loss(model, features, 256)["loss"]
    seen = []
    result = train_translation(model, features, steps=40, max_tokens=64, learning_rate=1e-2, warmup_steps=10,
                               average_last=3, checkpoint_every=2, evaluate=lambda m: seen.append(1) or
                               evaluate_loss(m, features, 256), eval_every=20, evaluate_before_average=True,
                               progress=False)
    assert result.averaged == 3 and result.steps == 40 and not result.diverged
    assert [e["averaged"] for e in result.evaluations] == [1, 1, 3]
    assert result.evaluations[-1]["loss"] < before - 1.0
    with pytest.raises(ValueError, match="do not fit"):
        train_translation(model, features, steps=4, max_tokens=64, learning_rate=1e-3, warmup_steps=1,
                          average_last=5, checkpoint_every=2, progress=False)


def test_bf16_training_runs_the_forward_in_bf16_and_keeps_fp32_weights_and_loss(tiny_translator, monkeypatch):
    """precision="bf16": the model's matmuls run under bf16 autocast (its logits come out bf16), while the weights,
    the loss and the optimiser stay fp32; its first loss is the fp32 loss to bf16's precision, not equal to it; it
    learns as fp32 does. Anything else is refused by name."""
    _, tokenizer = tiny_translator
    features = encode_pairs(tokenizer, TOY_SOURCES * 8, TOY_TARGETS * 8, 16)
    options = dict(steps=60, max_tokens=64, learning_rate=1e-2, warmup_steps=10, seed=0, progress=False,
                   log_every=1)  # loss_curve[0] is then the first step's loss, from the same weights and batch
    results, logit_dtypes = {}, {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(1)
        model = ZooSeq2SeqForConditionalGeneration(tiny_translator[0].config)
        seen = []
        hook = model.register_forward_hook(lambda module, args, output: seen.append(output.logits.dtype))
        before = evaluate_loss(model, features, 256)["loss"]
        results[precision] = train_translation(model, features, precision=precision, **options)
        hook.remove()
        logit_dtypes[precision] = set(seen[1:])  # seen[0]: the evaluation above, outside training
        assert all(p.dtype == torch.float32 for p in model.parameters())
        assert evaluate_loss(model, features, 256)["loss"] < before - 1.0
    assert logit_dtypes == {"fp32": {torch.float32}, "bf16": {torch.bfloat16}}
    first = {precision: result.loss_curve[0][1] for precision, result in results.items()}
    assert first["bf16"] != first["fp32"]
    assert first["bf16"] == pytest.approx(first["fp32"], rel=2e-2)  # bf16 keeps 8 bits of mantissa: ~0.4 % a value
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, got 'fp16'"):
        train_translation(tiny_translator[0], features, precision="fp16", **options)


# ------------------------------------------------------------------------------------------------ corpora
class _Stop(Exception):
    pass


def _stop_at_fifth_evaluation(features):
    """An `evaluate` that stops training at its fifth call (a kill mid-run), scoring the dev loss before that."""
    calls = []

    def evaluate(model):
        calls.append(1)
        if len(calls) == 5:
            raise _Stop
        return evaluate_loss(model, features, 256)

    return evaluate


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the GPU path of the translation study")
def test_a_gpu_run_trains_averages_and_resumes_on_the_gpu(tiny_translator, tmp_path):
    """The study's `--device cuda`: batches follow the model to the GPU, checkpoints kept for averaging wait on the
    CPU, and a run stopped mid-way resumes from its snapshot (the GPU's dropout state included) to the weights of a
    run never stopped, up to float32 rounding (GPU kernels may reduce in another order from call to call)."""
    _, tokenizer = tiny_translator
    config = tiny_translator[0].config
    config = type(config).from_dict({**config.to_dict(), "dropout": 0.2})
    features = encode_pairs(tokenizer, TOY_SOURCES * 8, TOY_TARGETS * 8, 16)
    options = dict(steps=30, max_tokens=32, learning_rate=1e-2, warmup_steps=5, average_last=3, checkpoint_every=4,
                   seed=3, eval_every=5, progress=False)

    def fresh():
        torch.manual_seed(7)
        return ZooSeq2SeqForConditionalGeneration(config).to("cuda")

    straight = fresh()
    before = evaluate_loss(straight, features, 256)["loss"]
    expected = train_translation(straight, features, evaluate=lambda m: evaluate_loss(m, features, 256), **options)
    assert expected.averaged == 3 and expected.evaluations[-1]["loss"] < before - 0.5
    assert next(straight.parameters()).device.type == "cuda"
    snapshot = tmp_path / "run.snapshot"
    with pytest.raises(_Stop):
        train_translation(fresh(), features, evaluate=_stop_at_fifth_evaluation(features), snapshot=snapshot,
                          snapshot_every=10, snapshot_key="k", **options)
    torch.cuda.manual_seed(123)
    resumed = fresh()
    result = train_translation(resumed, features, evaluate=lambda m: evaluate_loss(m, features, 256),
                               snapshot=snapshot, snapshot_every=10, snapshot_key="k", **options)
    assert result.steps == expected.steps and result.target_tokens == expected.target_tokens
    for name, tensor in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], tensor, rtol=1e-4, atol=1e-5)


def test_a_run_stopped_mid_way_resumes_from_its_snapshot_to_the_same_weights(tiny_translator, tmp_path):
    _, tokenizer = tiny_translator
    config = tiny_translator[0].config
    config = type(config).from_dict({**config.to_dict(), "dropout": 0.2})  # dropout: the random state must resume
    features = encode_pairs(tokenizer, TOY_SOURCES * 8, TOY_TARGETS * 8, 16)
    options = dict(steps=30, max_tokens=32, learning_rate=1e-2, warmup_steps=5, average_last=3, checkpoint_every=4,
                   seed=3, eval_every=5, progress=False)

    def fresh():
        torch.manual_seed(7)
        return ZooSeq2SeqForConditionalGeneration(config)

    straight = fresh()
    expected = train_translation(straight, features, evaluate=lambda m: evaluate_loss(m, features, 256), **options)

    snapshot = tmp_path / "run.snapshot"
    with pytest.raises(_Stop):  # evaluations every 5 steps: the 5th comes after the step-20 snapshot
        train_translation(fresh(), features, evaluate=_stop_at_fifth_evaluation(features), snapshot=snapshot,
                          snapshot_every=10, snapshot_key="the settings", **options)
    assert snapshot.exists()
    torch.manual_seed(123)  # another process, another random state: the snapshot's is restored
    resumed = fresh()
    result = train_translation(resumed, features, evaluate=lambda m: evaluate_loss(m, features, 256),
                               snapshot=snapshot, snapshot_every=10, snapshot_key="the settings", **options)
    assert not snapshot.exists()  # removed once the run is done
    for name, tensor in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], tensor, rtol=0, atol=0)
    assert result.steps == expected.steps and result.averaged == expected.averaged == 3
    assert result.loss_curve == expected.loss_curve
    assert [e["step"] for e in result.evaluations] == [e["step"] for e in expected.evaluations]
    assert result.target_tokens == expected.target_tokens

    # A snapshot of other settings is not resumed from: the run starts over (and warns).
    with pytest.raises(_Stop):
        train_translation(fresh(), features, evaluate=_stop_at_fifth_evaluation(features), snapshot=snapshot,
                          snapshot_every=10, snapshot_key="the settings", **options)
    other = fresh()
    train_translation(other, features, snapshot=snapshot, snapshot_every=10, snapshot_key="other settings",
                      **options)
    for name, tensor in straight.state_dict().items():
        torch.testing.assert_close(other.state_dict()[name], tensor, rtol=0, atol=0)


def test_a_resumed_run_counts_the_cpu_time_of_its_earlier_attempts(tiny_translator, tmp_path):
    """The study's CPU hours cover every attempt of a run: the snapshot carries the training CPU time so far, the
    resumed run adds its own to it and says how much came before. A snapshot written before CPU time was carried
    makes the earlier time unknown (None), never zero."""
    _, tokenizer = tiny_translator
    features = encode_pairs(tokenizer, TOY_SOURCES * 8, TOY_TARGETS * 8, 16)
    options = dict(steps=30, max_tokens=32, learning_rate=1e-2, warmup_steps=5, seed=3, eval_every=5,
                   progress=False, snapshot_every=10, snapshot_key="k")

    def fresh():
        torch.manual_seed(7)
        return ZooSeq2SeqForConditionalGeneration(tiny_translator[0].config)

    straight = train_translation(fresh(), features, **options, snapshot=tmp_path / "straight.snapshot")
    assert straight.earlier_cpu_seconds == 0.0 and straight.cpu_seconds > 0.0
    snapshot = tmp_path / "run.snapshot"
    with pytest.raises(_Stop):
        train_translation(fresh(), features, evaluate=_stop_at_fifth_evaluation(features), snapshot=snapshot,
                          **options)
    saved = torch.load(snapshot, weights_only=True)["result"]
    assert saved["steps"] == 20 and saved["cpu_seconds"] > 0.0
    older = tmp_path / "older.snapshot"  # the same state as a snapshot from before the field was added
    state = torch.load(snapshot, weights_only=True)
    del state["result"]["cpu_seconds"], state["result"]["earlier_cpu_seconds"]
    torch.save(state, older)

    resumed = train_translation(fresh(), features, snapshot=snapshot, **options)
    assert resumed.earlier_cpu_seconds == saved["cpu_seconds"]
    assert resumed.cpu_seconds > resumed.earlier_cpu_seconds
    from_older = train_translation(fresh(), features, snapshot=older, **options)
    assert from_older.steps == 30 and from_older.earlier_cpu_seconds is None and from_older.cpu_seconds is None


def test_a_longer_budget_continues_a_finished_runs_state_to_the_weights_of_a_longer_run(tiny_translator, tmp_path):
    """keep_final_state: a run of 20 steps leaves its last state; the same run given 30 steps continues from it and
    ends with the weights (averaged checkpoints included) of a 30-step run trained straight through, bit for bit.
    A state from a longer budget is not used for a shorter one."""
    _, tokenizer = tiny_translator
    config = tiny_translator[0].config
    config = type(config).from_dict({**config.to_dict(), "dropout": 0.2})  # the random state must carry over
    features = encode_pairs(tokenizer, TOY_SOURCES * 8, TOY_TARGETS * 8, 16)
    options = dict(max_tokens=32, learning_rate=1e-2, warmup_steps=5, average_last=3, checkpoint_every=4, seed=3,
                   progress=False)

    def fresh():
        torch.manual_seed(7)
        return ZooSeq2SeqForConditionalGeneration(config)

    straight = fresh()
    expected = train_translation(straight, features, steps=30, **options)
    state = tmp_path / "run.state"
    short = train_translation(fresh(), features, steps=20, snapshot=state, snapshot_every=10, snapshot_key="k",
                              keep_final_state=True, **options)
    assert short.steps == 20 and short.averaged == 3 and state.exists()  # the state before averaging stays
    saved = torch.load(state, weights_only=True)
    assert saved["finished"] and saved["result"]["steps"] == 20 and saved["kept_steps"] == [12, 16, 20]
    longer = fresh()
    result = train_translation(longer, features, steps=30, snapshot=state, snapshot_every=10, snapshot_key="k",
                               keep_final_state=True, **options)
    for name, tensor in straight.state_dict().items():
        torch.testing.assert_close(longer.state_dict()[name], tensor, rtol=0, atol=0)
    assert result.steps == 30 and result.averaged == expected.averaged == 3
    assert result.target_tokens == expected.target_tokens
    assert torch.load(state, weights_only=True)["kept_steps"] == [22, 26, 30]  # the 20-step ending's were dropped
    # The 30-step state cannot serve a 20-step budget: that run starts over (and ends as a fresh 20-step run).
    again = fresh()
    train_translation(again, features, steps=20, snapshot=state, snapshot_key="k", **options)
    reference = fresh()
    train_translation(reference, features, steps=20, **options)
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], tensor, rtol=0, atol=0)


def test_osis_markup_becomes_plain_text():
    markup = ('<w lemma="strong:H7225">In the beginning</w> God<note type="x-study">a note</note> '
              '<transChange type="added">was</transChange> &amp; <title>A Psalm</title>good. ')
    assert osis_to_text(markup) == "In the beginning God was & good."


@needs_bibles
def test_bible_pairs_are_verse_aligned_and_splits_share_no_verse():
    sources, targets = bible_pairs()
    assert len(sources) == len(targets) > 31000
    assert sources[0].startswith("In the beginning God created the heaven and the earth")
    assert targets[0].startswith("EN el principio crió Dios los cielos y la tierra")
    assert not any("<" in text or ">" in text for text in sources[:2000] + targets[:2000])
    corpus = load_corpus("bible-en-es", validation_fraction=0.03, test_fraction=0.03)
    seen = {}
    for split in ("train", "validation", "test"):
        for column in ("source", "target"):
            for text in corpus[split][column]:
                assert seen.setdefault((column, text), split) == split  # no verse text in two splits
    assert corpus_card_info(corpus)["licence"] == "Public domain (both translations)."


def test_quran_pairs_and_user_tsv_go_through_the_same_splitting(tmp_path):
    corpus = load_corpus("quran-en-ur", validation_fraction=0.05, test_fraction=0.05)
    assert sum(len(split) for split in corpus.values()) > 6000
    assert any("\u0600" <= ch <= "\u06ff" for ch in corpus["train"][0]["target"])  # Urdu script
    pairs = tmp_path / "pairs.tsv"
    rows = [f"sentence {i}\tfrase {i}" for i in range(40)] + ["sentence 3\totra frase"]  # a repeated source
    pairs.write_text("source\ttarget\n" + "\n".join(rows) + "\n", encoding="utf-8")
    user = load_corpus(str(pairs), validation_fraction=0.1, test_fraction=0.1)
    assert sum(len(split) for split in user.values()) == 40  # the duplicate source is dropped


# ------------------------------------------------------------------------------------------------ scripts/translate.py
def test_translate_script_file_stdin_and_reference(tiny_translator, tmp_path):
    model, tokenizer = tiny_translator
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    sources = ["the cat sat", "", "a dog ran"]
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    expected = translate(model, tokenizer, ["the cat sat", "a dog ran"], num_beams=2, extra_length=5)
    (tmp_path / "ref.txt").write_text("\n".join([expected[0], "", "something else"]) + "\n", encoding="utf-8")
    script = load_script("translate")
    assert script.main([str(folder), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt"),
                        "--num_beams", "2", "--extra_length", "5", "--reference", str(tmp_path / "ref.txt"),
                        "--scores", str(tmp_path / "scores.json")]) == 0
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert lines[:3] == [expected[0], "", expected[1]]  # the empty line stays, the output lines up
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["sentences"] == 3 and "tok:13a" in scores["bleu_signature"]
    # stdin to stdout, in a fresh process
    run = subprocess.run([sys.executable, str(REPO / "scripts" / "translate.py"), str(folder), "--num_beams", "2",
                          "--extra_length", "5"], input="the cat sat\n", capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout == expected[0] + "\n"
    # bad inputs: a folder without a model, a reference of the wrong length, a non-seq2seq model
    assert script.main([str(tmp_path), "--input", str(tmp_path / "in.txt")]) == 2
    (tmp_path / "short.txt").write_text("one line\n")
    assert script.main([str(folder), "--input", str(tmp_path / "in.txt"), "--reference",
                        str(tmp_path / "short.txt")]) == 2
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    assert script.main([str(folder), "--input", str(tmp_path / "latin1.txt")]) == 2
    bare = tmp_path / "no-tokenizer"
    model.save_pretrained(bare)
    assert script.main([str(bare), "--input", str(tmp_path / "in.txt")]) == 2


def test_translate_script_decodes_a_folder_the_way_it_says(tiny_translator, tmp_path, capsys):
    """A model folder's translation_decoding.json (the study's --save-models writes it) sets the longest source and
    the sentence splitter: a longer line goes in sentence pieces, as the study's test decode did; the flags win."""
    from transformer_zoo.translation import save_decoding_defaults

    model, tokenizer = tiny_translator
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    sentences = ["the cat sat.", "A dog ran"]
    lengths = [len(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in sentences]
    limit = max(lengths) + 1
    assert sum(lengths) + 1 > limit
    save_decoding_defaults(folder, max_source_tokens=limit, source_sentences="english")
    (tmp_path / "in.txt").write_text(" ".join(sentences) + "\n", encoding="utf-8")
    script = load_script("translate")
    common = [str(folder), "--input", str(tmp_path / "in.txt"), "--num_beams", "2", "--extra_length", "5"]
    assert script.main([*common, "--output", str(tmp_path / "pieces.txt")]) == 0
    pieces = translate(model, tokenizer, sentences, num_beams=2, extra_length=5, max_source_tokens=limit)
    assert (tmp_path / "pieces.txt").read_text(encoding="utf-8") == " ".join(pieces) + "\n"
    assert "1 of 1 sources were longer than" in capsys.readouterr().err
    assert script.main([*common, "--output", str(tmp_path / "cut.txt"), "--split_sentences", "none"]) == 0
    cut = translate(model, tokenizer, [" ".join(sentences)], num_beams=2, extra_length=5, max_source_tokens=limit)
    assert (tmp_path / "cut.txt").read_text(encoding="utf-8") == cut[0] + "\n"
