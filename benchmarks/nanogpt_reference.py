"""A nanoGPT-style GPT, written here from the public description of Karpathy's nanoGPT (github.com/karpathy/nanoGPT,
its README and "Let's build GPT" lecture): pre-norm blocks with biased LayerNorms, one fused Linear for q/k/v,
`F.scaled_dot_product_attention(is_causal=True)`, an exact-GELU MLP of width 4d, learned positions, and the output
layer tied to the token embedding. Used only as a timing peer by benchmarks/compare_hf.py; its weights are copied from
a zoo decoder of the same shape (hidden_act="gelu"), and the benchmark checks the two agree before timing.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                                  is_causal=True)
        x = x + self.resid_dropout(self.c_proj(attended.transpose(1, 2).reshape(batch, length, width)))
        return x + self.resid_dropout(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class NanoGPT(nn.Module):
    def __init__(self, vocab_size: int, context: int, width: int, layers: int, heads: int, dropout: float = 0.1):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, width)
        self.wpe = nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, input_ids, labels=None):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.drop(self.wte(input_ids) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return loss, logits


@torch.no_grad()
def from_zoo(zoo_model, dropout: float = 0.1) -> NanoGPT:
    """A NanoGPT holding a zoo GPT-2-shaped decoder's weights (hidden_act="gelu", learned positions, pre-norm)."""
    config = zoo_model.config
    model = NanoGPT(config.vocab_size, config.max_position_embeddings, config.hidden_size, config.num_hidden_layers,
                    config.num_attention_heads, dropout)
    zoo = zoo_model.model
    model.wte.weight.copy_(zoo.embed_tokens.weight)
    model.wpe.weight.copy_(zoo.positions.embedding.weight)
    model.ln_f.load_state_dict(zoo.norm.state_dict())
    for block, layer in zip(model.h, zoo.layers, strict=True):
        attention = layer.self_attn
        block.c_attn.weight.copy_(torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight]))
        block.c_attn.bias.copy_(torch.cat([attention.q_proj.bias, attention.k_proj.bias, attention.v_proj.bias]))
        block.c_proj.load_state_dict(attention.o_proj.state_dict())
        block.ln_1.load_state_dict(layer.self_attn_norm.state_dict())
        block.ln_2.load_state_dict(layer.mlp_norm.state_dict())
        block.c_fc.load_state_dict(layer.mlp.up_proj.state_dict())
        block.mlp_proj.load_state_dict(layer.mlp.down_proj.state_dict())
    return model
