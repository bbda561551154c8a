"""Encoder-decoder family: the Transformer of "Attention Is All You Need" (Vaswani et al. 2017).

The encoder is a bidirectional zoo stack, the decoder a causal one with cross-attention. Source and target share
one vocabulary and one embedding matrix (section 3.4), which the output layer reuses when `tie_word_embeddings`.
Generation runs through transformers' GenerationMixin with an EncoderDecoderCache: the decoder's self-attention keys
and values grow step by step, the cross-attention ones are computed once from the encoder output.
"""

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.models.bart.modeling_bart import shift_tokens_right
from transformers.utils import can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_zoo_seq2seq import ZooSeq2SeqConfig
from .modeling_zoo_checks import check_labels, padding_target_id, take_loss_keywords
from .modeling_zoo_generation import ZooGenerationMixin
from .modeling_zoo_layers import ZooAttention, ZooBlock, ZooPreTrainedModel, plain_linears
from .modeling_zoo_stack import ZooStackMixin, accepts_past_key_values, build_token_embedding
from .modeling_zoo_losses import loss_over_labelled_rows, share_of_accumulated_batch


class ZooSeq2SeqPreTrainedModel(ZooPreTrainedModel):
    config_class = ZooSeq2SeqConfig
    AUTO_MAP = {
        "AutoConfig": "configuration_zoo_seq2seq.ZooSeq2SeqConfig",
        "AutoModel": "modeling_zoo_seq2seq.ZooSeq2SeqModel",
        "AutoModelForSeq2SeqLM": "modeling_zoo_seq2seq.ZooSeq2SeqForConditionalGeneration",
    }

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, ZooSeq2SeqForConditionalGeneration):
            init.zeros_(module.final_logits_bias)


class ZooSeq2SeqEncoder(ZooStackMixin, ZooSeq2SeqPreTrainedModel):
    _can_record_outputs = {
        "hidden_states": ZooBlock,
        "attentions": OutputRecorder(ZooAttention, index=1, layer_name="self_attn"),
    }

    def __init__(self, config: ZooSeq2SeqConfig):
        super().__init__(config)
        self.embed_tokens = build_token_embedding(config)
        self.build_stack(config, config.encoder_layers, is_causal=False)
        self.post_init()

    @capture_outputs
    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs) -> BaseModelOutput:
        inputs_embeds = self.embed_inputs(input_ids, inputs_embeds)
        hidden_states = self.run_stack(inputs_embeds, attention_mask=attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class ZooSeq2SeqDecoder(ZooStackMixin, ZooSeq2SeqPreTrainedModel):
    _can_record_outputs = {
        "hidden_states": ZooBlock,
        "attentions": OutputRecorder(ZooAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(ZooAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: ZooSeq2SeqConfig):
        super().__init__(config)
        self.embed_tokens = build_token_embedding(config)
        self.build_stack(config, config.decoder_layers, is_causal=True, has_cross_attention=True)
        self.post_init()

    @accepts_past_key_values
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        cache: Cache | None = None,
        inputs_embeds=None,
        use_cache: bool | None = None,
        position_ids=None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        inputs_embeds = self.embed_inputs(input_ids, inputs_embeds, "decoder_input_ids")
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        hidden_states = self.run_stack(
            inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            **kwargs,
        )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, cache=cache if use_cache else None
        )


class ZooSeq2SeqModel(ZooSeq2SeqPreTrainedModel):
    """Shared embedding, encoder and decoder; returns the decoder's last hidden states."""

    _tied_weights_keys = {"encoder.embed_tokens.weight": "shared.weight", "decoder.embed_tokens.weight": "shared.weight"}

    def __init__(self, config: ZooSeq2SeqConfig):
        super().__init__(config)
        self.shared = build_token_embedding(config)
        self.encoder = ZooSeq2SeqEncoder(config)
        self.decoder = ZooSeq2SeqDecoder(config)
        self.post_init()

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        # Source and target always share one embedding (Vaswani et al. 3.4). transformers drops every tie when
        # tie_word_embeddings is False; here that flag only unties the output layer, so the shared input embedding
        # is declared unconditionally.
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return dict(self._tied_weights_keys)

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache: Cache | None = None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        use_cache: bool | None = None,
        decoder_position_ids=None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            position_ids=decoder_position_ids,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            cache=decoder_outputs.cache,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class ZooSeq2SeqForConditionalGeneration(ZooSeq2SeqPreTrainedModel, ZooGenerationMixin):
    """Translation/summarisation head: logits over the shared vocabulary, cross-entropy on aligned labels."""

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: ZooSeq2SeqConfig):
        super().__init__(config)
        self.model = ZooSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        # A per-token output bias: zero when trained here, present so Marian and BART checkpoints convert exactly.
        self.final_logits_bias = nn.Buffer(torch.zeros(1, config.vocab_size))
        self.post_init()

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        old = self.final_logits_bias
        new = torch.zeros(1, embeddings.num_embeddings, device=old.device, dtype=old.dtype)
        keep = min(old.shape[1], new.shape[1])
        new[:, :keep] = old[:, :keep]
        self.final_logits_bias = nn.Buffer(new)
        return embeddings

    @staticmethod
    def _reorder_cache(cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search's reordering of the cache between steps (GenerationMixin calls it where a model defines it).

        Only the decoder's self-attention keys and values are reordered. transformers' beam search picks each beam's
        parent among the beams of the same source (it adds the source's offset to the chosen index), and generate
        expands the encoder output so those beams share it; their cross-attention keys and values are the same rows,
        so reordering them copies the whole cross-attention cache each step and changes nothing. (OpenNMT and
        fairseq2 skip it too.) Tokens and scores are identical (tests/test_generation.py -k cross_attention_cache);
        the time saved grows with the source length (benchmarks/beam_search_cache.py).
        """
        if isinstance(cache, EncoderDecoderCache):
            cache.self_attention_cache.reorder_cache(beam_idx)
        else:
            cache.reorder_cache(beam_idx)
        return cache

    @accepts_past_key_values
    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache: Cache | None = None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        decoder_position_ids=None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        labels, _ = take_loss_keywords(self, labels, kwargs)
        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            if self.config.pad_token_id is None:
                raise ValueError("Deriving decoder_input_ids from labels needs config.pad_token_id.")
            decoder_input_ids = shift_tokens_right(
                labels, self.config.pad_token_id, self.config.decoder_start_token_id
            )
            use_cache = False
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            decoder_position_ids=decoder_position_ids,
            **kwargs,
        )
        logits, loss_logits = self.vocabulary_projection(outputs.last_hidden_state, extra_bias=self.final_logits_bias)
        loss = None
        if labels is not None:
            check_labels(labels, shape=logits.shape[:2], num_classes=self.config.vocab_size,
                         num_items_in_batch=kwargs.get("num_items_in_batch"), padding_id=padding_target_id(self.config))
            # Labels are already aligned with the decoder inputs (shifted above), so plain cross-entropy; the
            # `*ForConditionalGeneration` loss transformers would pick shifts again.
            # Where at most half the positions have a target, the backward runs over those only.
            loss = loss_over_labelled_rows(outputs.last_hidden_state, loss_logits, labels, self.lm_head,
                                           head_is_plain=plain_linears([self.lm_head]),
                                           logits_bias=self.final_logits_bias)
            loss = share_of_accumulated_batch(loss, labels, kwargs.get("num_items_in_batch"))
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


ZooSeq2SeqModel.register_for_auto_class("AutoModel")
ZooSeq2SeqForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
