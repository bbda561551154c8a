"""The Urdu adaptation study's arms (benchmarks/urdu_adaptation.py): each arm's recipe flags, the names that stand for
several, the variants that repeat a base arm's run with other downstream flags, each arm's downstream precision and
protocol group, and the reference each group is compared with."""

from __future__ import annotations

# The translation experiment's Urdu-to-English model (python scripts/reproduce.py --experiment translation
# --save-models outputs/translation-models), for translate-test.
TRANSLATOR = "outputs/translation-models/urdu-translation-ur-en"
# Continued pretraining of every weight at the rate the committed study used (the recipe's default is LoRA).
FULL = ["--mode", "full", "--learning_rate", "5e-4"]
SMOLLM2_MEASURES = ["--per_device_batch_size", "8", "--bpb_sentences", "40"]
ARMS = {
    "unadapted": ["--adapt", "false"],
    "none": ["--extend_vocab", "false", *FULL],
    "random": ["--extend_vocab", "true", "--embedding_init", "random", *FULL],
    "mean": ["--extend_vocab", "true", "--embedding_init", "mean", *FULL],
    "focus": ["--extend_vocab", "true", "--embedding_init", "focus", *FULL],
    "trans-tokenization": ["--extend_vocab", "true", "--embedding_init", "trans-tokenization", *FULL],
    "lora": ["--extend_vocab", "true", "--embedding_init", "mean", "--mode", "lora", "--learning_rate", "1e-3"],
    # The same architecture and extended tokenizer as the adapted arms, random weights, the same Urdu text and steps.
    "from-scratch": ["--from_scratch", "true", "--extend_vocab", "true", *FULL],
    # The English model on the Urdu test paragraphs translated by our own ur->en model (never trained on them).
    "translate-test": ["--adapt", "false", "--downstream_translate_test", TRANSLATOR],
    # The decoder, unadapted and adapted, as two runs: each has its own downstream fine-tune (about 1.5 h of one core
    # here), so that each fits a working session, and the two can run side by side. Both measure bits per byte on the
    # same 40 held-out sentences, in batches of 8. The adapted one trains every weight at 1e-4, as its committed run
    # did: like every arm, it names its mode rather than take the recipe's default (which became LoRA after that run
    # and silently turned this arm into LoRA at a full-training rate: 2.607 Urdu bits per byte against 1.837).
    "smollm2-unadapted": ["--model", "smollm2", "--adapt", "false", *SMOLLM2_MEASURES],
    "smollm2-none": ["--model", "smollm2", "--extend_vocab", "false", "--mode", "full", "--max_steps", "40",
                     "--eval_steps", "10", "--save_steps", "none", "--learning_rate", "1e-4", *SMOLLM2_MEASURES],
}
# Names that stand for several arms in --arms and --tasks.
ARM_ALIASES = {"smollm2": ("smollm2-unadapted", "smollm2-none")}
# Variants: a base arm's run with other downstream flags, compared within their own group (below).
# The equal-text control: the unadapted and the default arm fine-tuned on the first EQUAL_WORDS words of every
# paragraph, with a token budget that covers them for both tokenizers (MiniLM spells Urdu at ~3.2 pieces a word, so
# 20 words take ~64 of its tokens: 128 leaves room for long words; each run records how many paragraphs were still
# cut), so both read the same text. The study's own check gives each 64 tokens: ~20 words for the unadapted model
# against ~60 for the extended tokenizer.
EQUAL_WORDS = 20
EQUAL_TEXT = ["--downstream_max_words", str(EQUAL_WORDS), "--downstream_max_length", "128"]
EQUAL_TEXT_ARMS = {"unadapted-equal-text": "unadapted", "lora-equal-text": "lora"}
# The fp32 references: the unadapted and the default arm again, downstream in fp32 like every arm added after the
# committed seven (see PRECISION below), so that the later arms are compared with references checked the same way.
FP32_ARMS = {"unadapted-fp32": "unadapted", "lora-fp32": "lora"}
VARIANT_ARMS = {**{arm: (base, EQUAL_TEXT) for arm, base in EQUAL_TEXT_ARMS.items()},
                **{arm: (base, []) for arm, base in FP32_ARMS.items()}}
# The downstream precision of each arm. The committed seven ran under bf16 autocast on a CPU that multiplies bf16
# natively (AMX); this project's CPU changed between sessions to one without it, where a bf16 matmul of the
# fine-tune's size takes 8x as long as fp32 (measured 196 against 24 ms, one thread), which would make the later arms
# take days. They run in fp32, beside fp32 references (FP32_ARMS); bf16 against fp32 changed single-seed accuracies by
# about one seed spread (docs/urdu/convergence-lora.md), so the two groups are compared within themselves only.
BF16_ARMS = ("unadapted", "none", "random", "mean", "focus", "trans-tokenization", "lora")


def arm_precision(arm: str, budget: str = "default") -> str:
    """The arm's --downstream_mixed_precision value ("no": fp32). A --quick study checks the pipeline in fp32: on a
    CPU without native bf16 its tiny fine-tunes would spend minutes in emulated bf16 kernels."""
    return "bf16" if arm in BF16_ARMS and budget != "quick" else "no"


def protocol_group(arm: str) -> str:
    """Arms whose downstream checks must share one protocol: the committed seven (bf16), the equal-text control,
    and the arms checked in fp32 (the fp32 references, from-scratch, translate-test, the decoder)."""
    if arm in BF16_ARMS:
        return "bf16"
    return "equal-text" if arm in EQUAL_TEXT_ARMS else "fp32"


# records of the unadapted model
UNADAPTED_MODEL_ARMS = ("unadapted", "translate-test", "unadapted-equal-text", "unadapted-fp32",
                        "smollm2-unadapted")
CITATIONS = {
    "unadapted": "the starting model",
    "none": "continued pretraining only (Gururangan et al. 2020)",
    "random": "transformers' default resizing (Hewitt 2021)",
    "mean": "mean of old pieces (Gee et al. 2022)",
    "focus": "FOCUS (Dobler & de Melo 2023)",
    "trans-tokenization": "trans-tokenization (Remy et al. 2024), eflomal (Östling & Tiedemann 2016)",
    "lora": "LoRA (Hu et al. 2022) + trainable new rows (PEFT trainable_token_indices)",
    "from-scratch": "the same architecture and extended tokenizer from random weights, the same Urdu text and steps",
    "translate-test": "the unadapted model fine-tuned on the English task, tested on the Urdu test paragraphs "
                      "translated by our own Urdu-English model",
    "unadapted-equal-text": f"the unadapted model, downstream on the first {EQUAL_WORDS} words of every paragraph",
    "lora-equal-text": f"the default arm (lora), downstream on the first {EQUAL_WORDS} words of every paragraph",
    "unadapted-fp32": "the starting model, downstream in fp32 (the reference of the fp32 arms)",
    "lora-fp32": "the default arm (lora), downstream in fp32 (the reference of the fp32 arms)",
    "smollm2-unadapted": "SmolLM2-135M-Instruct as it is (byte-level BPE)",
    "smollm2-none": "SmolLM2-135M-Instruct, continued causal-LM pretraining of every weight, no new vocabulary",
}
RECORD_ORDER = [*BF16_ARMS, *FP32_ARMS, "from-scratch", "translate-test", *EQUAL_TEXT_ARMS, "smollm2-unadapted",
                "smollm2-none"]

# The unadapted model checked the way each group's arms are: the reference of their comparisons.
REFERENCES = {"bf16": "unadapted", "fp32": "unadapted-fp32", "equal-text": "unadapted-equal-text"}
