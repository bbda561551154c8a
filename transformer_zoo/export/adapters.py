"""Export a LoRA adapter trained on a zoo model as a PEFT adapter for the exported native model.

The adapted modules and their weights are read from the live zoo PeftModel (so PEFT's own rank_pattern /
alpha_pattern resolution decides each module's rank and scaling), renamed through the export's parameter rules, and
written as an explicit per-module LoRA config for the native model: target_modules lists full module paths, and
rank_pattern / alpha_pattern give every module the rank and scaling it had.

One case needs more than a rename: GPT-2 fuses q, k and v into one Conv1D (c_attn). LoRA adapters on the zoo's
separate projections become one LoRA on c_attn whose A stacks the parts' A matrices and whose B is block-diagonal
(each part's B, times its scaling, in the rows of its projection), with scaling 1: B_f A_f x = [s_q B_q A_q x;
s_k B_k A_k x; s_v B_v A_v x], the same delta. In training the fused module draws one lora_dropout mask for the three
parts instead of three; evaluation outputs are identical.
"""

import math
import os

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from peft.tuners.lora import LoraLayer
from peft.utils.other import ModulesToSaveWrapper
from transformers.utils import logging

from ..conversion_tables import LAYOUT_ONLY_RESHAPES, NATIVE_FORMATS, find_rule
from .native import UnsupportedExportError, _prefix, choose_format, export_model


logger = logging.get_logger(__name__)

# LoraConfig options whose adapters this export does not map (each changes weights or names beyond LoRA's A and B).
UNSUPPORTED_OPTIONS = {
    "use_dora": "DoRA's magnitude vectors",
    "lora_bias": "LoRA biases",
    "trainable_token_indices": "trainable token rows",
    "target_parameters": "adapters on bare parameters",
    "layer_replication": "replicated layers",
}
ADAPTER_NAME = "default"


def _native_name(zoo_name: str, zoo_model, native_model, native_format):
    """(native parameter name, its rule, index of the zoo tensor within a fused one, the zoo names fused with it)
    for a zoo parameter name."""
    zoo_prefix, native_prefix = _prefix(zoo_model), _prefix(native_model)
    rules, relative, in_backbone = native_format.rules_for(zoo_name, zoo_prefix)
    out_prefix = native_prefix if in_backbone else ""
    rule, match = find_rule(rules, relative, "zoo")
    if rule is None:
        raise UnsupportedExportError(f"The adapter touches {zoo_name!r}, which has no {native_format.name} counterpart.")
    index, slots = match
    zoo_prefix = zoo_prefix if in_backbone else ""
    fused_with = tuple(zoo_prefix + name for name in rule.zoo_names(slots))
    return out_prefix + rule.native_name(slots), rule, index, fused_with


def _check_config(config: LoraConfig) -> None:
    if config.peft_type != "LORA":
        raise UnsupportedExportError(
            f"Only LoRA adapters export (this one is {config.peft_type}); merge it into the model "
            "(model.merge_and_unload()) and export the merged model instead."
        )
    for option, what in UNSUPPORTED_OPTIONS.items():
        if getattr(config, option, None):
            raise UnsupportedExportError(
                f"This LoRA adapter uses {option} ({what}), which the export does not map yet; merge it into the "
                "model (merge_and_unload()) and export the merged model."
            )
    if config.bias != "none":
        raise UnsupportedExportError(
            f"This LoRA adapter trains biases (bias={config.bias!r}); merge it (merge_and_unload()) and export the "
            "merged model."
        )


def _lora_modules(zoo_peft: PeftModel) -> dict:
    """zoo module name (relative to the zoo model) -> its LoRA layer."""
    prefix = "base_model.model."
    return {
        name.removeprefix(prefix): module
        for name, module in zoo_peft.named_modules()
        if isinstance(module, LoraLayer)
        and (ADAPTER_NAME in module.lora_A or ADAPTER_NAME in module.lora_embedding_A)
    }


@torch.no_grad()
def export_lora_adapter(zoo_peft: PeftModel, to: str = "auto"):
    """(native base model, native PeftModel with the same adapter) for a zoo model carrying a LoRA adapter."""
    config = zoo_peft.peft_config[ADAPTER_NAME]
    _check_config(config)
    zoo_model = zoo_peft.get_base_model()
    model_type = choose_format(zoo_model.config, to)
    native_format = NATIVE_FORMATS[model_type]
    # The base without the adapter: PEFT's layers wrap the zoo modules, so export from a clean copy of the weights.
    clean = type(zoo_model)(zoo_model.config)
    clean.load_state_dict(_strip_peft_names(zoo_model.state_dict()), strict=True)
    clean.train(False)
    native_base = export_model(clean, model_type)
    native_copy = export_model(clean, model_type)  # the one that gets the adapter (get_peft_model wraps in place)

    # Module by module: native module -> parts (index within a fused tensor -> A, B, scaling) and the plain settings.
    fused: dict[str, dict[int, tuple]] = {}
    ranks, alphas, targets = {}, {}, []
    plain_weights = {}
    for zoo_name, layer in _lora_modules(zoo_peft).items():
        is_embedding = ADAPTER_NAME in getattr(layer, "lora_embedding_A", {})
        native_param, rule, index, fused_with = _native_name(zoo_name + ".weight", zoo_model, native_base, native_format)
        native_module = native_param.removesuffix(".weight")
        if is_embedding:
            a, b = layer.lora_embedding_A[ADAPTER_NAME], layer.lora_embedding_B[ADAPTER_NAME]
        else:
            a, b = layer.lora_A[ADAPTER_NAME].weight, layer.lora_B[ADAPTER_NAME].weight
        if rule.to_native not in (None, *LAYOUT_ONLY_RESHAPES) and len(rule.zoo_templates) == 1:
            raise UnsupportedExportError(
                f"The adapter on {zoo_name!r} maps to a reshaped {native_format.name} tensor; merge it "
                "(merge_and_unload()) and export the merged model."
            )
        if len(rule.zoo_templates) > 1:
            # Rows of each fused part in the native output: the zoo projections' widths, in order.
            widths = [clean.get_submodule(name.removesuffix(".weight")).out_features for name in fused_with]
            offset = sum(widths[:index])
            fused.setdefault(native_module, {})[index] = (
                a.detach().clone(), b.detach().clone(), layer.scaling[ADAPTER_NAME], offset, sum(widths))
            continue
        targets.append(native_module)
        ranks[native_module], alphas[native_module] = layer.r[ADAPTER_NAME], layer.lora_alpha[ADAPTER_NAME]
        plain_weights[native_module] = (a.detach().clone(), b.detach().clone(), is_embedding)

    fused_weights = {}
    for native_module, parts in fused.items():
        out_features = next(iter(parts.values()))[4]
        total_rank = sum(part[0].shape[0] for part in parts.values())
        fused_a = torch.cat([parts[i][0] for i in sorted(parts)], dim=0)
        fused_b = fused_a.new_zeros(out_features, total_rank)
        column = 0
        for i in sorted(parts):
            a, b, scaling, offset, _ = parts[i]
            fused_b[offset : offset + b.shape[0], column : column + a.shape[0]] = b * scaling
            column += a.shape[0]
        targets.append(native_module)
        ranks[native_module] = total_rank
        alphas[native_module] = math.sqrt(total_rank) if config.use_rslora else total_rank  # scaling 1
        fused_weights[native_module] = (fused_a, fused_b)

    saved = []
    for wrapper_name, module in zoo_peft.named_modules():
        if isinstance(module, ModulesToSaveWrapper):
            trained = module.modules_to_save[ADAPTER_NAME]
            zoo_module = wrapper_name.removeprefix("base_model.model.")
            for param_name, value in trained.state_dict().items():
                native_param, rule, _, _ = _native_name(f"{zoo_module}.{param_name}", zoo_model, native_base, native_format)
                saved.append((native_param, rule.to_native(value) if rule.to_native else value))
    modules_to_save = sorted({name.rsplit(".", 1)[0] for name, _ in saved}) or None
    # Every tensor of the adapter must have been carried over: A and B per adapted module, and the saved modules.
    # (Without the full embedding matrices PEFT adds when an embedding is adapted: they are the base weights.)
    adapter_tensors = get_peft_model_state_dict(zoo_peft, adapter_name=ADAPTER_NAME, save_embedding_layers=False)
    carried = 2 * (len(plain_weights) + sum(len(parts) for parts in fused.values())) + len(saved)
    if carried != len(adapter_tensors):
        raise UnsupportedExportError(
            f"The adapter has {len(adapter_tensors)} tensors and the export mapped {carried} "
            f"({', '.join(sorted(adapter_tensors)[:6])} ...); it holds parts this export does not know. Merge it "
            "(merge_and_unload()) and export the merged model."
        )

    native_config = LoraConfig(
        r=config.r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        use_rslora=config.use_rslora,
        target_modules=sorted(set(targets)),
        rank_pattern={f"^{name}$": rank for name, rank in ranks.items()},
        alpha_pattern={f"^{name}$": alpha for name, alpha in alphas.items()},
        modules_to_save=modules_to_save,
        task_type=config.task_type,
        fan_in_fan_out=native_format.model_type == "gpt2",  # GPT-2's Conv1D stores [in, out]
        init_lora_weights=False,
    )
    native_peft = get_peft_model(native_copy, native_config)
    native_modules = dict(native_peft.base_model.model.named_modules())
    for native_module, (a, b, is_embedding) in plain_weights.items():
        layer = native_modules[native_module]
        if is_embedding:
            layer.lora_embedding_A[ADAPTER_NAME].copy_(a)
            layer.lora_embedding_B[ADAPTER_NAME].copy_(b)
        else:
            layer.lora_A[ADAPTER_NAME].weight.copy_(a)
            layer.lora_B[ADAPTER_NAME].weight.copy_(b)
    for native_module, (a, b) in fused_weights.items():
        layer = native_modules[native_module]
        layer.lora_A[ADAPTER_NAME].weight.copy_(a)
        layer.lora_B[ADAPTER_NAME].weight.copy_(b)
    for native_param, value in saved:
        module_name, param_name = native_param.rsplit(".", 1)
        wrapper = native_modules[module_name]
        getattr(wrapper.modules_to_save[ADAPTER_NAME], param_name).copy_(value)
    native_peft.train(zoo_peft.training)
    return native_base, native_peft


def _strip_peft_names(state: dict) -> dict:
    """A PEFT-wrapped model's state dict with LoRA tensors left out and base-layer names restored."""
    clean = {}
    for name, tensor in state.items():
        if ".lora_" in name or ".modules_to_save." in name:
            continue
        clean[name.replace(".base_layer.", ".").replace(".original_module.", ".")] = tensor
    return clean


def save_adapter_export(native_base, native_peft, out_dir: str, *, src_base: str | None = None,
                        base_name: str | None = None) -> tuple[str, str]:
    """Save the native base to out_dir/base (with the zoo base folder's tokenizer) and the adapter to
    out_dir/adapter, whose base_model_name_or_path is `base_name` (default: the absolute path of out_dir/base)."""
    from .native import save_export

    base_dir, adapter_dir = os.path.join(out_dir, "base"), os.path.join(out_dir, "adapter")
    save_export(native_base, base_dir, src=src_base)
    native_peft.peft_config[ADAPTER_NAME].base_model_name_or_path = base_name or os.path.abspath(base_dir)
    native_peft.save_pretrained(adapter_dir)
    return base_dir, adapter_dir
