"""Default PEFT target modules for the zoo's model types, so `LoraConfig()` (and IA3, LoHa, LoKr, AdaLoRA, OFT, ...)
work with no `target_modules` on every family.

PEFT picks defaults per `config.model_type` from one mapping per method (`peft.utils.constants`,
`TRANSFORMERS_MODELS_TO_<METHOD>_TARGET_MODULES_MAPPING`, read through each tuner's `target_module_mapping`); a type
missing from it fails with "Please specify target_modules". Adding a model type to those mappings is how PEFT's
own architectures are supported and how its "custom models" guide extends them. The zoo names its projections as
Llama does (q_proj, k_proj, v_proj, o_proj, up_proj, gate_proj, down_proj), so each method's default for "llama" is
the right default here too: only methods whose Llama default names zoo modules are registered (LN tuning, for
example, targets Llama's `input_layernorm`, which the zoo does not have).

`import transformer_zoo` calls `register_peft_defaults()` when PEFT is installed. A checkpoint loaded as remote
code (`trust_remote_code=True` without transformer-zoo) has no such registration: pass `target_modules` there.
"""

ZOO_MODEL_TYPES = ("zoo_encoder", "zoo_decoder", "zoo_seq2seq", "zoo_vit")
# Module names (last component) a zoo model has; a default is registered only when it names these alone.
ZOO_MODULE_NAMES = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "gate_proj", "down_proj"})


def _mappings() -> list[dict]:
    """Every default-target mapping PEFT consults, each dict once: the tuners' `target_module_mapping` and the
    module-level `TRANSFORMERS_MODELS_TO_*_MODULES_MAPPING` dicts some tuners read directly (IA3's targets and
    feed-forward modules)."""
    from peft.mapping import PEFT_TYPE_TO_TUNER_MAPPING
    from peft.utils import constants

    candidates = [getattr(tuner, "target_module_mapping", None) for tuner in PEFT_TYPE_TO_TUNER_MAPPING.values()]
    candidates += [
        value for name, value in vars(constants).items()
        if name.startswith("TRANSFORMERS_MODELS_TO_") and name.endswith("_MODULES_MAPPING")
    ]
    return list({id(mapping): mapping for mapping in candidates if isinstance(mapping, dict)}.values())


def register_peft_defaults() -> list[str]:
    """Register the zoo model types in PEFT's default-target mappings; returns the names of the methods'
    mappings that were extended (for logging and tests). Safe to call twice."""
    registered = []
    for mapping in _mappings():
        llama_default = mapping.get("llama")
        if not isinstance(llama_default, list | tuple) or not set(llama_default) <= ZOO_MODULE_NAMES:
            continue
        for model_type in ZOO_MODEL_TYPES:
            mapping.setdefault(model_type, list(llama_default))
        registered.append(id(mapping))
    return registered


def linear_layer_names(model) -> list[str]:
    """The last name component of every nn.Linear in `model`, sorted: what a LoRA target list usually names."""
    from torch import nn

    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, nn.Linear)})


def unmatched_target_modules(model, target_modules) -> list[str]:
    """The names in `target_modules` (a list, as `LoraConfig(target_modules=[...])` takes it) that match no module
    of `model` (not yet wrapped by PEFT), by PEFT's own rule for each name alone.

    PEFT adapts every module that matches any listed name and raises only when none matches, so a list with one
    wrong name (`q_proj,value` on a model whose projections are q_proj and v_proj) trains without the adapters the
    user asked for, silently."""
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists

    keys = [name for name, _ in model.named_modules()]
    return [name for name in target_modules
            if not any(check_target_module_exists(LoraConfig(target_modules=[name]), key) for key in keys)]


def check_target_modules(model, target_modules, *, flag: str = "target_modules") -> None:
    """ValueError naming the `target_modules` entries that match no module of `model` (unmatched_target_modules),
    with the model's linear layer names; `flag` is how the caller's user spells the setting."""
    unmatched = unmatched_target_modules(model, target_modules)
    if unmatched:
        raise ValueError(f"{flag} {','.join(unmatched)}: no module of the model has that name, so no adapter would "
                         f"train there; the model's linear layers are named {', '.join(linear_layer_names(model))}.")
