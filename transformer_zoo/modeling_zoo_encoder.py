"""Encoder-only (BERT-style) family: a bidirectional stack of zoo blocks with BERT's heads.

With the default config this is BERT-base: learned positions, token types, a norm on the summed embeddings,
post-norm blocks, GELU. Every head follows transformers' BERT so converted checkpoints give identical logits.
"""

import torch
from torch import nn
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_zoo_encoder import ZooEncoderConfig
from .modeling_zoo_checks import (
    check_classification_labels,
    check_labels,
    check_span_positions,
    check_token_ids,
    take_loss_keywords,
)
from .modeling_zoo_layers import (
    ZooAttention,
    ZooBlock,
    ZooPooler,
    ZooPreTrainedModel,
    build_norm,
    classifier_dropout,
    get_activation,
    plain_linears,
)
from .modeling_zoo_stack import ZooStackMixin, build_token_embedding, leading_positions_read
from .modeling_zoo_losses import loss_over_labelled_rows, share_of_accumulated_batch, token_cross_entropy
from .modeling_zoo_vocabulary import project_vocabulary


class ZooEncoderPreTrainedModel(ZooPreTrainedModel):
    config_class = ZooEncoderConfig
    _can_record_outputs = {
        "hidden_states": ZooBlock,
        "attentions": OutputRecorder(ZooAttention, index=1, layer_name="self_attn"),
    }
    AUTO_MAP = {
        "AutoConfig": "configuration_zoo_encoder.ZooEncoderConfig",
        "AutoModel": "modeling_zoo_encoder.ZooEncoderModel",
        "AutoModelForMaskedLM": "modeling_zoo_encoder.ZooEncoderForMaskedLM",
        "AutoModelForSequenceClassification": "modeling_zoo_encoder.ZooEncoderForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_zoo_encoder.ZooEncoderForTokenClassification",
        "AutoModelForQuestionAnswering": "modeling_zoo_encoder.ZooEncoderForQuestionAnswering",
    }


class ZooEncoderModel(ZooStackMixin, ZooEncoderPreTrainedModel):
    """Token (+ token-type) embeddings, a bidirectional stack and, optionally, BERT's pooler."""

    def __init__(self, config: ZooEncoderConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embed_tokens = build_token_embedding(config)
        self.embed_token_types = (
            nn.Embedding(config.type_vocab_size, config.hidden_size) if config.type_vocab_size else None
        )
        self.build_stack(config, config.num_hidden_layers, is_causal=False)
        self.pooler = ZooPooler(config) if add_pooling_layer else None
        self.post_init()

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        leading_positions: int | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        """leading_positions: compute the last layer for the first positions only, for a caller that reads only
        those (the pooler reads the first); last_hidden_state then has that many positions (`run_stack`)."""
        inputs_embeds = self.embed_inputs(input_ids, inputs_embeds)
        type_embeddings = None
        if self.embed_token_types is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
            else:
                check_token_ids(token_type_ids, self.config.type_vocab_size, "token_type_ids")
                if token_type_ids.shape != inputs_embeds.shape[:2]:
                    raise ValueError(f"token_type_ids has shape {tuple(token_type_ids.shape)}, expected "
                                     f"{tuple(inputs_embeds.shape[:2])} (one segment id per input token).")
            type_embeddings = self.embed_token_types(token_type_ids)
        elif token_type_ids is not None and bool((token_type_ids != 0).any()):
            raise ValueError(
                "token_type_ids were given but this model has no token-type embedding (type_vocab_size=0); "
                "drop them, or build the model with type_vocab_size > 0."
            )
        hidden_states = self.run_stack(
            inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            extra_embeddings=type_embeddings,
            leading_positions=leading_positions,
            **kwargs,
        )
        pooled = self.pooler(hidden_states) if self.pooler is not None else None
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states, pooler_output=pooled)


class ZooMaskedLMHead(nn.Module):
    """BERT's prediction head: dense -> activation -> norm -> vocabulary projection (tied to the input embedding)."""

    def __init__(self, config: ZooEncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act_fn = get_activation(config.hidden_act)
        self.norm = build_norm(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)

    def transform(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The states the vocabulary projection reads."""
        return self.norm(self.act_fn(self.dense(hidden_states)))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))


class ZooEncoderForMaskedLM(ZooEncoderPreTrainedModel):
    _tied_weights_keys = {"lm_head.decoder.weight": "model.embed_tokens.weight"}

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config)
        self.model = ZooEncoderModel(config, add_pooling_layer=False)
        self.lm_head = ZooMaskedLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> MaskedLMOutput:
        labels, _ = take_loss_keywords(self, labels, kwargs)
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        hidden = outputs.last_hidden_state
        loss = None
        if labels is not None:
            check_labels(labels, shape=hidden.shape[:2], num_classes=self.config.vocab_size,
                         num_items_in_batch=kwargs.get("num_items_in_batch"))
            labels = labels.to(hidden.device)
            if self.config.sparse_prediction:
                # Only labelled positions enter the loss: project just those (see ZooEncoderConfig).
                labelled = labels != -100
                logits = self.lm_head(hidden[labelled])
                loss = token_cross_entropy(logits, labels[labelled])
            else:
                transformed = self.lm_head.transform(hidden)
                logits, loss_logits = project_vocabulary(self.lm_head.decoder, transformed,
                                                         enabled=self.config.row_aligned_logits)
                # The same loss as over every row, with a backward over the labelled rows only (about 15 % of
                # them: 0.3 of the head's two backward products instead of 2).
                loss = loss_over_labelled_rows(transformed, loss_logits, labels, self.lm_head.decoder,
                                               head_is_plain=plain_linears([self.lm_head.decoder]), few_labelled=True)
            loss = share_of_accumulated_batch(loss, labels, kwargs.get("num_items_in_batch"))
        else:
            logits = self.lm_head(hidden)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class ZooEncoderForSequenceClassification(ZooEncoderPreTrainedModel):
    """Pooled [CLS] -> dropout -> linear, as BERT. `problem_type` picks regression, single- or multi-label loss."""

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ZooEncoderModel(config)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
        labels: torch.LongTensor | None = None, **kwargs,
    ) -> SequenceClassifierOutput:
        labels, _ = take_loss_keywords(self, labels, kwargs)
        # The head reads the pooled first position only: the last layer computes that row alone (run_stack).
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                             leading_positions=leading_positions_read(self.config, kwargs, 1), **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output))
        loss = None
        if labels is not None:
            check_classification_labels(labels, self.config, logits.shape[0], kwargs.get("num_items_in_batch"))
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
            loss = share_of_accumulated_batch(loss, labels, kwargs.get("num_items_in_batch"))
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class ZooEncoderForTokenClassification(ZooEncoderPreTrainedModel):
    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ZooEncoderModel(config, add_pooling_layer=False)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
        labels: torch.LongTensor | None = None, **kwargs,
    ) -> TokenClassifierOutput:
        labels, _ = take_loss_keywords(self, labels, kwargs)
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            check_labels(labels, shape=logits.shape[:2], num_classes=self.config.num_labels,
                         num_items_in_batch=kwargs.get("num_items_in_batch"))
            loss = self.loss_function(logits, labels, self.config)
            loss = share_of_accumulated_batch(loss, labels, kwargs.get("num_items_in_batch"))
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class ZooEncoderForQuestionAnswering(ZooEncoderPreTrainedModel):
    """Extractive QA: start and end logits for every token (SQuAD-style)."""

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config)
        self.model = ZooEncoderModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
        start_positions: torch.LongTensor | None = None, end_positions: torch.LongTensor | None = None, **kwargs,
    ) -> QuestionAnsweringModelOutput:
        take_loss_keywords(self, None, kwargs)  # the span loss ignores positions past the sequence, not an index
        outputs = self.model(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        start_logits, end_logits = self.qa_outputs(outputs.last_hidden_state).split(1, dim=-1)
        start_logits, end_logits = start_logits.squeeze(-1).contiguous(), end_logits.squeeze(-1).contiguous()
        loss = None
        check_span_positions(start_positions, end_positions, start_logits.shape[0])
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions, **kwargs)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


ZooEncoderModel.register_for_auto_class("AutoModel")
ZooEncoderForMaskedLM.register_for_auto_class("AutoModelForMaskedLM")
ZooEncoderForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
ZooEncoderForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
ZooEncoderForQuestionAnswering.register_for_auto_class("AutoModelForQuestionAnswering")
