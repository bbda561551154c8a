"""Write zoo decoders as GGUF files (llama.cpp's format), through their native Llama or GPT-2 export.

The tensors are the exported native model's, renamed with the `gguf` package's own name map (the one transformers'
GGUF reader inverts) and laid out as llama.cpp stores them: Llama's q and k rows permuted from transformers' rotate-
half order to the interleaved pairs llama.cpp's RoPE expects; GPT-2's Conv1D weights transposed to [out, in]. F32 or
F16 (matrices in F16, vectors in F32 as llama.cpp keeps them); no quantisation.

Only what transformers' reader can load back exactly is written, so `from_pretrained(folder, gguf_file=...)` is the
check. That reader takes Llama's shape from the metadata but assumes no biases and a SiLU gate, and for GPT-2 reads
neither the context length nor the MLP width nor the activation (it keeps GPT-2's defaults: 1024 positions, 4 x
hidden, gelu_new); configs outside that are refused by name.

The tokenizer goes in too, when the zoo folder has a byte-level BPE one (GPT-2, SmolLM, Llama 3 style), as
llama.cpp's "gpt2" tokenizer model: tokens by id, their types, merges and the special token ids. GPT-2 GGUF files need
it (the reader takes the vocabulary size from it); for Llama it is optional (and written when present).
"""

import json
import os

import numpy as np
import torch
from transformers.utils import logging

from .native import UnsupportedExportError, choose_format, export_model


logger = logging.get_logger(__name__)

GGUF_DTYPES = ("f32", "f16")
# Zoo fields transformers' GGUF reader does not read, per architecture, with the value it assumes instead.
READER_ASSUMES = {
    "llama": {"attention_bias": False, "mlp_bias": False, "hidden_act": "swiglu"},
    "gpt2": {"max_position_embeddings": 1024, "hidden_act": "gelu_new"},
}
# llama.cpp token types (gguf.TokenType).
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5


def gguf_problems(zoo_config, model_type: str) -> list[str]:
    problems = [
        f"{field}={getattr(zoo_config, field)!r} (transformers' GGUF reader assumes {value!r})"
        for field, value in READER_ASSUMES[model_type].items()
        if getattr(zoo_config, field) != value
    ]
    if model_type == "gpt2" and zoo_config.intermediate_size != 4 * zoo_config.hidden_size:
        problems.append(
            f"intermediate_size={zoo_config.intermediate_size} (transformers' GGUF reader assumes 4 x hidden_size = "
            f"{4 * zoo_config.hidden_size})"
        )
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(getattr(zoo_config, name), list):
            problems.append(f"{name}={getattr(zoo_config, name)} (GGUF stores one id)")
    return problems


def _permute_for_llama_cpp(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """transformers' rotate-half row order -> llama.cpp's interleaved pairs, per head (the inverse of the permutation
    transformers' reader undoes)."""
    head_dim = weight.shape[0] // num_heads
    return weight.reshape(num_heads, 2, head_dim // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


GPT2_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def _tensors(native_model, model_type: str, gguf_module):
    """(gguf name, numpy array) for every tensor the file holds."""
    config = native_model.config
    arch = gguf_module.MODEL_ARCH.LLAMA if model_type == "llama" else gguf_module.MODEL_ARCH.GPT2
    name_map = gguf_module.get_tensor_name_map(arch, config.num_hidden_layers)
    tied = config.tie_word_embeddings
    for hf_name, tensor in native_model.state_dict().items():
        if hf_name == "lm_head.weight" and tied:
            continue  # the reader ties output to token_embd when output.weight is absent
        module, _, suffix = hf_name.rpartition(".")
        gguf_name = name_map.get_name(module)
        if gguf_name is None:
            raise RuntimeError(f"The gguf package has no {arch.name} name for {hf_name!r}.")
        array = tensor.detach().float().cpu().numpy()
        if model_type == "llama" and hf_name.endswith("self_attn.q_proj.weight"):
            array = _permute_for_llama_cpp(array, config.num_attention_heads)
        elif model_type == "llama" and hf_name.endswith("self_attn.k_proj.weight"):
            array = _permute_for_llama_cpp(array, config.num_key_value_heads)
        elif model_type == "gpt2" and hf_name.endswith(GPT2_CONV1D):
            array = array.T
        yield f"{gguf_name}.{suffix}", np.ascontiguousarray(array)


def _byte_level_bpe(tokenizer_file: str, vocab_size: int) -> dict | None:
    """tokens, token types, merges and the llama.cpp pre-tokenizer name of a byte-level BPE tokenizer.json, padded
    to the model's vocabulary with unused [PAD<i>] tokens; None for any other kind of tokenizer."""
    with open(tokenizer_file, encoding="utf-8") as handle:
        spec = json.load(handle)
    model = spec.get("model") or {}
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    if model.get("type") != "BPE" or not any(step.get("type") == "ByteLevel" for step in steps):
        return None
    # llama.cpp's names for the two byte-level pre-tokenizers recognised here; others get its "default".
    kinds = [step.get("type") for step in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        pre_name = "gpt2"
    elif kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits"):
        pre_name = "smollm"
    else:
        pre_name = "default"
        logger.warning("The tokenizer's pre-tokenizer has no llama.cpp name known here; the GGUF says 'default'.")
    tokens: list[str | None] = [None] * vocab_size
    types = [NORMAL] * vocab_size
    for token, index in model["vocab"].items():
        if index < vocab_size:
            tokens[index] = token
    for added in spec.get("added_tokens", []):
        if added["id"] < vocab_size:
            tokens[added["id"]] = added["content"]
            types[added["id"]] = CONTROL if added.get("special") else USER_DEFINED
    for index, token in enumerate(tokens):
        if token is None:
            tokens[index], types[index] = f"[PAD{index}]", UNUSED
    if max(model["vocab"].values(), default=-1) >= vocab_size:
        raise UnsupportedExportError(
            f"The tokenizer has ids up to {max(model['vocab'].values())} but the model only {vocab_size} embedding rows."
        )
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model.get("merges", [])]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": pre_name}


def export_gguf(zoo_model, out_file: str, *, dtype: str = "f32", tokenizer_dir: str | None = None, name: str = "") -> str:
    """Write the zoo decoder `zoo_model` as a GGUF file (Llama or GPT-2 architecture, whichever expresses it
    exactly). `tokenizer_dir`: a folder with a tokenizer.json to embed. Returns `out_file`."""
    try:
        import gguf
    except ImportError as error:
        raise ImportError("GGUF export needs the `gguf` package: pip install gguf") from error
    if dtype not in GGUF_DTYPES:
        raise ValueError(f"dtype={dtype!r}; choose one of {', '.join(GGUF_DTYPES)} (GGUF export does not quantise).")
    config = zoo_model.config
    if getattr(config, "model_type", None) != "zoo_decoder" or type(zoo_model).__name__ != "ZooDecoderForCausalLM":
        raise UnsupportedExportError(
            f"GGUF export takes a ZooDecoderForCausalLM (llama.cpp runs language models), got {type(zoo_model).__name__}."
        )
    model_type = choose_format(config)
    problems = gguf_problems(config, model_type)
    tokenizer_file = os.path.join(tokenizer_dir, "tokenizer.json") if tokenizer_dir else None
    vocabulary = None
    if tokenizer_file and os.path.isfile(tokenizer_file):
        vocabulary = _byte_level_bpe(tokenizer_file, config.vocab_size)
        if vocabulary is None:
            logger.warning("The tokenizer is not byte-level BPE; the GGUF file is written without one.")
    if vocabulary is None and model_type == "gpt2":
        problems.append("no byte-level BPE tokenizer.json beside the model (a GPT-2 GGUF file needs its vocabulary)")
    elif vocabulary is None and not problems:
        logger.warning("No tokenizer goes into the GGUF file: transformers reads it back, but llama.cpp needs one to "
                       "run it. Save the model's tokenizer (byte-level BPE) beside it and export again.")
    if problems:
        raise UnsupportedExportError(f"Cannot write this model as a {model_type} GGUF file: {'; '.join(problems)}.")

    # In float32 whatever the zoo model's dtype (the file's F16 is rounded from it below); the zoo model is untouched.
    native_model = export_model(zoo_model, model_type).float()
    native_config = native_model.config
    writer = gguf.GGUFWriter(out_file, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA if model_type == "llama" else gguf.MODEL_ARCH.GPT2])
    writer.add_name(name or "transformer-zoo export")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    if model_type == "llama":
        writer.add_head_count_kv(config.num_key_value_heads)
        writer.add_rope_dimension_count(config.head_dim)
        writer.add_rope_freq_base(float(config.rope_theta))
        writer.add_layer_norm_rms_eps(config.layer_norm_eps)
        writer.add_vocab_size(config.vocab_size)
        # llama.cpp derives the head size from embedding_length / head_count unless told otherwise.
        if config.head_dim * config.num_attention_heads != config.hidden_size:
            writer.add_key_length(config.head_dim)
            writer.add_value_length(config.head_dim)
    else:
        writer.add_layer_norm_eps(config.layer_norm_eps)
    if vocabulary is not None:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(vocabulary["pre"])
        writer.add_token_list(vocabulary["tokens"])
        writer.add_token_types(vocabulary["types"])
        writer.add_token_merges(vocabulary["merges"])
    # The reader fills the config's special token ids from these keys.
    for key, adder in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                       ("pad_token_id", writer.add_pad_token_id)):
        if getattr(native_config, key, None) is not None:
            adder(getattr(native_config, key))
    for tensor_name, array in _tensors(native_model, model_type, gguf):
        if dtype == "f16" and array.ndim > 1:
            array = array.astype(np.float16)
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_file


def rounded_like_gguf(zoo_model, dtype: str):
    """A copy of `zoo_model` whose weights are what a GGUF file of `dtype` stores (F16 matrices, F32 vectors), for
    comparing the reloaded file exactly."""
    import copy

    reference = copy.deepcopy(zoo_model).float()
    if dtype == "f16":
        with torch.no_grad():
            for parameter in reference.parameters():
                if parameter.ndim > 1:
                    parameter.copy_(parameter.half().float())
    return reference
