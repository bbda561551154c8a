"""Decoder-only (GPT-style) family: a causal stack of zoo blocks with a language-model head.

With the default config this is GPT-2 small; with `ZooDecoderConfig.from_preset("smollm2-135m")` a Llama-style
decoder (RoPE, RMSNorm, SwiGLU, GQA). Generation, caching and masks are transformers' own (GenerationMixin,
DynamicCache, create_causal_mask).
"""

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    SequenceClassifierOutputWithPast,
)
from transformers.modeling_utils import slice_logits_to_keep
from transformers.utils import can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_zoo_decoder import ZooDecoderConfig
from .modeling_zoo_checks import (
    check_classification_labels,
    check_labels,
    padding_target_id,
    take_loss_keywords,
    values_are_checkable,
)
from .modeling_zoo_generation import ZooGenerationMixin
from .modeling_zoo_layers import ZooAttention, ZooBlock, ZooPreTrainedModel, plain_linears
from .modeling_zoo_stack import ZooStackMixin, accepts_past_key_values, build_token_embedding
from .modeling_zoo_losses import (
    chunked_causal_lm_loss,
    loss_over_labelled_rows,
    share_of_accumulated_batch,
    token_cross_entropy,
)


class ZooDecoderPreTrainedModel(ZooPreTrainedModel):
    config_class = ZooDecoderConfig
    _can_record_outputs = {
        "hidden_states": ZooBlock,
        "attentions": OutputRecorder(ZooAttention, index=1, layer_name="self_attn"),
    }
    AUTO_MAP = {
        "AutoConfig": "configuration_zoo_decoder.ZooDecoderConfig",
        "AutoModel": "modeling_zoo_decoder.ZooDecoderModel",
        "AutoModelForCausalLM": "modeling_zoo_decoder.ZooDecoderForCausalLM",
        "AutoModelForSequenceClassification": "modeling_zoo_decoder.ZooDecoderForSequenceClassification",
    }


class ZooDecoderModel(ZooStackMixin, ZooDecoderPreTrainedModel):
    """Token embeddings followed by a causal stack; returns the final hidden states and the cache."""

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.embed_tokens = build_token_embedding(config)
        self.build_stack(config, config.num_hidden_layers, is_causal=True)
        self.post_init()

    @accepts_past_key_values
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        inputs_embeds = self.embed_inputs(input_ids, inputs_embeds)
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        hidden_states = self.run_stack(
            inputs_embeds, attention_mask=attention_mask, position_ids=position_ids, cache=cache, **kwargs
        )
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, cache=cache if use_cache else None)


class ZooDecoderForCausalLM(ZooDecoderPreTrainedModel, ZooGenerationMixin):
    """The decoder with a (by default tied) language-model head: next-token logits and the shifted LM loss."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.model = ZooDecoderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        labels, shift = take_loss_keywords(self, labels, kwargs, shifts_labels=True)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        loss = logits = None
        if labels is not None:
            check_labels(labels, shape=outputs.last_hidden_state.shape[:2], num_classes=self.config.vocab_size,
                         num_items_in_batch=kwargs.get("num_items_in_batch"), shifted=shift,
                         padding_id=padding_target_id(self.config))
        chunked = labels is not None and self.config.loss_chunk_size and type(self.lm_head) is nn.Linear
        if chunked:
            # Opt-in (config.loss_chunk_size): the loss without the full logits, which are then not returned.
            loss = chunked_causal_lm_loss(outputs.last_hidden_state, self.lm_head.weight, labels,
                                          self.config.loss_chunk_size, kwargs.get("num_items_in_batch"), shift=shift)
        else:
            logits, loss_logits = self.vocabulary_projection(
                slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep))
        if labels is not None and not chunked:
            # transformers' ForCausalLMLoss (labels shifted, -100 ignored, num_items_in_batch), with less work; where
            # at most half the positions have a target (a masked prompt, padding), the backward runs over those only.
            if isinstance(logits_to_keep, int) and logits_to_keep == 0:
                loss = loss_over_labelled_rows(outputs.last_hidden_state, loss_logits, labels, self.lm_head,
                                               head_is_plain=plain_linears([self.lm_head]), shift=shift,
                                               num_items_in_batch=kwargs.get("num_items_in_batch"))
            else:
                loss = token_cross_entropy(loss_logits, labels, kwargs.get("num_items_in_batch"), shift=shift)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class ZooDecoderForSequenceClassification(ZooDecoderPreTrainedModel):
    """Classifies a sequence from the hidden state of its last real token (GPT-2's recipe), found from
    `attention_mask` (or `pad_token_id` without one).

    Written out rather than using transformers' GenericForSequenceClassification: that builds its backbone through
    AutoModel, which fails when the checkpoint is loaded as remote code in a process without transformer_zoo.
    """

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ZooDecoderModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutputWithPast:
        labels, _ = take_loss_keywords(self, labels, kwargs)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.score(outputs.last_hidden_state)
        batch_size = logits.shape[0]
        if attention_mask is not None:
            if values_are_checkable(attention_mask) and attention_mask.ndim == 2:
                empty = (attention_mask == 0).all(-1).nonzero().flatten()
                if empty.numel():
                    raise ValueError(f"attention_mask row {int(empty[0])} attends to no token: an empty sequence has "
                                     "nothing to classify (its 'last token' would be padding); drop it from the batch.")
            # Rightmost attended position; works for left and right padding alike.
            positions = torch.arange(attention_mask.shape[-1], device=logits.device)
            last = (attention_mask.to(logits.device).bool() * positions).argmax(-1)
        elif input_ids is not None and self.config.pad_token_id is not None:
            not_pad = (input_ids != self.config.pad_token_id).to(logits.device)
            last = (not_pad * torch.arange(input_ids.shape[-1], device=logits.device)).argmax(-1)
        elif batch_size == 1 or input_ids is None:
            last = torch.full((batch_size,), logits.shape[1] - 1, device=logits.device)
        else:
            raise ValueError(
                "Cannot find the last token of each sequence in a batch without attention_mask or pad_token_id: "
                "pass attention_mask, or set config.pad_token_id."
            )
        pooled_logits = logits[torch.arange(batch_size, device=logits.device), last]
        loss = None
        if labels is not None:
            check_classification_labels(labels, self.config, batch_size, kwargs.get("num_items_in_batch"))
            loss = self.loss_function(labels=labels, pooled_logits=pooled_logits, config=self.config)
            loss = share_of_accumulated_batch(loss, labels, kwargs.get("num_items_in_batch"))
        return SequenceClassifierOutputWithPast(
            loss=loss,
            logits=pooled_logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


ZooDecoderModel.register_for_auto_class("AutoModel")
ZooDecoderForCausalLM.register_for_auto_class("AutoModelForCausalLM")
ZooDecoderForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
