"""What every native format's table is made of: renaming rules over name templates (read both ways), the refusal and
activation helpers of the config mappings, and `NativeFormat`, one format's whole table."""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import torch
from transformers.activations import ACT2FN
from transformers.utils import logging

from ..configuration_zoo_common import GATED_ACTIVATIONS


logger = logging.get_logger(__name__)


class UnsupportedConversionError(ValueError):
    """The source uses a feature the target cannot reproduce exactly (the message names it)."""


# ================================================================================================ renaming rules
# Slots a name template may contain, and what each matches.
SLOTS = {
    "layer": r"\d+",
    "param": r"weight|bias",
    "stack": r"encoder|decoder",
    "qkv": r"q|k|v",
    "qkvo": r"q|k|v|o",
    "mlp": r"gate_proj|up_proj|down_proj",
}
_SLOT = re.compile(r"\{(\w+)\}")


def _template_regex(template: str) -> re.Pattern:
    parts, position = [], 0
    for slot in _SLOT.finditer(template):
        parts.append(re.escape(template[position : slot.start()]))
        parts.append(f"(?P<{slot.group(1)}>{SLOTS[slot.group(1)]})")
        position = slot.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


@dataclass(frozen=True)
class Rule:
    """One family of parameter names: `native` (relative to the backbone, or to the whole model for head tensors)
    corresponds to `zoo`, templates with the same slots, e.g. "h.{layer}.ln_1.{param}" <-> "layers.{layer}.
    self_attn_norm.{param}".

    `zoo` is a tuple when one native tensor holds several zoo tensors (GPT-2's fused q/k/v); `to_zoo` then splits it
    and `to_native` joins the parts. A reshape is always given as that pair. `zoo=None` marks a native tensor the zoo
    has no counterpart for: `check` verifies that the zoo recomputes it exactly (Marian's sinusoidal table; an export
    runs it on the native model's own value), `dropped_warning` is logged on conversion when dropping it changes an
    output, and `export_value` (native tensor -> value) is what an export writes there.
    """

    native: str
    zoo: str | tuple[str, ...] | None
    to_zoo: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]] | None = None
    to_native: Callable[..., torch.Tensor] | None = None
    dropped_warning: str | None = None
    check: Callable[[torch.Tensor], None] | None = None
    export_value: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __post_init__(self):
        if (self.to_zoo is None) != (self.to_native is None):
            raise TypeError(f"Rule {self.native!r}: give both to_zoo and to_native (a reshape and its inverse).")

    @cached_property
    def native_regex(self) -> re.Pattern:
        return _template_regex(self.native)

    @cached_property
    def zoo_templates(self) -> tuple[str, ...]:
        return () if self.zoo is None else self.zoo if isinstance(self.zoo, tuple) else (self.zoo,)

    @cached_property
    def zoo_regexes(self) -> tuple[re.Pattern, ...]:
        return tuple(_template_regex(template) for template in self.zoo_templates)

    def match_native(self, name: str) -> dict | None:
        match = self.native_regex.fullmatch(name)
        return match.groupdict() if match else None

    def match_zoo(self, name: str) -> tuple[int, dict] | None:
        """(index of the zoo template that matches, its slot values), or None."""
        for index, regex in enumerate(self.zoo_regexes):
            match = regex.fullmatch(name)
            if match:
                return index, match.groupdict()
        return None

    def native_name(self, slots: dict) -> str:
        return self.native.format(**slots)

    def zoo_names(self, slots: dict) -> tuple[str, ...]:
        return tuple(template.format(**slots) for template in self.zoo_templates)


def find_rule(rules, name: str, side: str):
    """The first rule whose `side` ("native" or "zoo") template matches `name`, with its match; (None, None) if none."""
    for rule in rules:
        match = rule.match_native(name) if side == "native" else rule.match_zoo(name)
        if match is not None:
            return rule, match
    return None, None


def _transpose(weight: torch.Tensor) -> torch.Tensor:
    # GPT-2's Conv1D stores [in, out] and computes x @ W; nn.Linear stores [out, in]. Its own inverse.
    return weight.t().contiguous()


# Reshapes that only change how a linear layer stores its weight (GPT-2's Conv1D): an adapter's low-rank factors on
# that layer are stored the same way in both (PEFT's Conv1D LoRA keeps nn.Linear's A and B).
LAYOUT_ONLY_RESHAPES = (_transpose,)


DECODER_HEAD_RULES = (
    Rule("lm_head.weight", "lm_head.weight"),
    Rule("score.weight", "score.weight"),
)


# ================================================================================================ config mapping
def _refuse(condition: bool, family: str, feature: str) -> None:
    if condition:
        raise UnsupportedConversionError(
            f"Cannot convert this {family} checkpoint: {feature}. The zoo model has no equivalent, so its outputs "
            "would differ from the source's."
        )


# Activation aliases that name the same function in ACT2FN; the zoo stores the canonical name.
ACTIVATION_ALIASES = {"swish": "silu"}


def _plain_activation(name, family: str) -> str:
    _refuse(not isinstance(name, str), family, f"a non-string activation ({name!r})")
    name = ACTIVATION_ALIASES.get(name, name)
    _refuse(name not in ACT2FN or name in GATED_ACTIVATIONS, family, f"activation {name!r}")
    return name


def _gated_activation(gate_activation, family: str) -> str:
    """Llama applies `hidden_act` to the gate of a gated MLP; the zoo names the pair (silu -> swiglu)."""
    gate_activation = ACTIVATION_ALIASES.get(gate_activation, gate_activation)
    zoo_names = {gate: zoo_name for zoo_name, gate in GATED_ACTIVATIONS.items()}
    _refuse(
        gate_activation not in zoo_names,
        family,
        f"gated MLP activation {gate_activation!r} (supported: {', '.join(sorted(zoo_names))})",
    )
    return zoo_names[gate_activation]


def _dropout(value) -> float:
    return float(value or 0.0)


# Each format's FIXED dict holds the zoo fields its architecture fixes: an exported config must have exactly these
# values; every other zoo field is carried by a native field (config_from_zoo) and checked by converting the
# exported config back (transformer_zoo.export). What the absolute-position LayerNorm formats (BERT, GPT-2) share:
_ABSOLUTE_LAYERNORM = dict(norm_type="layernorm", attention_bias=True, mlp_bias=True, norm_bias=True, scale_embedding=False)


# ================================================================================================ formats
@dataclass(frozen=True)
class NativeFormat:
    """How one transformers architecture maps onto a zoo family, both ways."""

    model_type: str  # the native config's model_type
    name: str  # as people write it, for messages
    native_config_class: type
    config_to_zoo: Callable[[object], dict]
    config_from_zoo: Callable[[object], dict]
    fixed: dict  # zoo fields the architecture fixes
    zoo_config_class: type
    backbone_rules: tuple[Rule, ...]
    head_rules: tuple[Rule, ...]
    has_token_ids: bool = True  # text families carry pad/bos/eos ids; ViT does not
    default_task: str = "base"  # the head convert_checkpoint loads when config.architectures does not say
    classes: dict = field(default_factory=dict)  # native class name -> zoo class, filled in __init__.py

    def rules_for(self, name: str, backbone_prefix: str) -> tuple[tuple[Rule, ...], str, bool]:
        """(the rules that name a parameter, its name relative to them, whether it is a backbone parameter): names
        under `backbone_prefix` ("" for a bare backbone) are backbone names without it; the rest are head names."""
        if name.startswith(backbone_prefix):
            return self.backbone_rules, name[len(backbone_prefix) :], True
        return self.head_rules, name, False
