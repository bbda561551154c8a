"""What Marian and BART share: fairseq's layer names, the post-norm LayerNorm layout with nn.LayerNorm's eps, and the
config fields of one d_model with per-stack heads and feed-forward widths (marian.py and bart.py add the rest)."""

from .common import Rule, _dropout, _plain_activation, logger


FAIRSEQ_LAYER_RULES = (
    Rule("shared.weight", "shared.weight"),
    Rule("{stack}.embed_tokens.weight", "{stack}.embed_tokens.weight"),
    Rule("{stack}.layers.{layer}.self_attn.{qkv}_proj.{param}", "{stack}.layers.{layer}.self_attn.{qkv}_proj.{param}"),
    Rule("{stack}.layers.{layer}.self_attn.out_proj.{param}", "{stack}.layers.{layer}.self_attn.o_proj.{param}"),
    Rule("{stack}.layers.{layer}.self_attn_layer_norm.{param}", "{stack}.layers.{layer}.self_attn_norm.{param}"),
    Rule("decoder.layers.{layer}.encoder_attn.{qkv}_proj.{param}", "decoder.layers.{layer}.cross_attn.{qkv}_proj.{param}"),
    Rule("decoder.layers.{layer}.encoder_attn.out_proj.{param}", "decoder.layers.{layer}.cross_attn.o_proj.{param}"),
    Rule("decoder.layers.{layer}.encoder_attn_layer_norm.{param}", "decoder.layers.{layer}.cross_attn_norm.{param}"),
    Rule("{stack}.layers.{layer}.fc1.{param}", "{stack}.layers.{layer}.mlp.up_proj.{param}"),
    Rule("{stack}.layers.{layer}.fc2.{param}", "{stack}.layers.{layer}.mlp.down_proj.{param}"),
    Rule("{stack}.layers.{layer}.final_layer_norm.{param}", "{stack}.layers.{layer}.mlp_norm.{param}"),
)
SEQ2SEQ_HEAD_RULES = (
    Rule("lm_head.weight", "lm_head.weight"),
    Rule("final_logits_bias", "final_logits_bias"),
)
# Both build their LayerNorms with nn.LayerNorm's default eps, not a config value.
_FAIRSEQ = dict(norm_position="post", norm_type="layernorm", layer_norm_eps=1e-5, attention_bias=True, mlp_bias=True,
                norm_bias=True)


def _seq2seq_config_to_zoo(config, family: str) -> dict:
    """Fields Marian and BART share: fairseq-style post-norm encoder-decoders with one d_model (each stack may have
    its own head count and feed-forward width)."""
    # Training-time only: eval outputs are unaffected, but fine-tuning the converted model will regularise differently.
    if _dropout(config.activation_dropout) > 0:
        logger.warning(
            f"{family} activation_dropout={config.activation_dropout} has no zoo equivalent (ZooMLP has no dropout "
            "after its activation); eval outputs are identical, training dropout differs."
        )
    if _dropout(config.encoder_layerdrop) > 0 or _dropout(config.decoder_layerdrop) > 0:
        logger.warning(f"{family} LayerDrop (encoder/decoder_layerdrop) is not supported by the zoo and is ignored.")
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        num_attention_heads=config.encoder_attention_heads,
        intermediate_size=config.encoder_ffn_dim,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        hidden_act=_plain_activation(config.activation_function, family),
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=bool(config.scale_embedding),
        embedding_dropout=_dropout(config.dropout),
        hidden_dropout=_dropout(config.dropout),
        attention_dropout=_dropout(config.attention_dropout),
        initializer_range=config.init_std,
        tie_word_embeddings=config.tie_word_embeddings,
        decoder_start_token_id=config.decoder_start_token_id,
    )


def _seq2seq_config_from_zoo(config) -> dict:
    return dict(
        vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function=config.hidden_act,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        dropout=config.hidden_dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        init_std=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        decoder_start_token_id=config.decoder_start_token_id,
    )
