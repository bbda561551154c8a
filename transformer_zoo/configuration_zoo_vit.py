"""Vision Transformer configuration. `ZooViTConfig()` is ViT-B/16 at 224 px (Dosovitskiy et al. 2021)."""

from typing import Any, ClassVar

from huggingface_hub.dataclasses import strict

from .configuration_zoo_common import ZooConfig


VIT_POSITION_TYPES = ("learned", "sincos2d", "none")
VIT_POOLINGS = ("cls", "mean")


@strict
class ZooViTConfig(ZooConfig):
    """A Vision Transformer. Defaults are ViT-B/16 at 224 px.

    ViT-specific fields:
        image_size, patch_size, num_channels: the patch grid is (image_size // patch_size) ** 2.
        pooling: "cls" (the [CLS] token, as ViT) or "mean" (average of patch tokens).
        use_distillation_token: add DeiT's distillation token and a second classifier (Touvron et al. 2021).
        conv_stem: replace the single patchifying convolution with a stack of 3x3 stride-2 convolutions
            (Xiao et al. 2021, "Early convolutions help transformers see better"); patch_size must be a power of 2.
        position_embedding_type: "learned", "sincos2d" (fixed 2-D sine-cosine, as MAE) or "none".
    """

    model_type = "zoo_vit"
    POSITION_TYPES: ClassVar[tuple[str, ...]] = VIT_POSITION_TYPES
    SAVED_FIELDS: ClassVar[tuple[str, ...]] = ZooConfig.SAVED_FIELDS + ("num_hidden_layers", "image_size", "patch_size", "num_channels")
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "vit-base": {},
        "vit-small": dict(hidden_size=384, num_attention_heads=6, intermediate_size=1536),
        "vit-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
        "deit-small": dict(
            hidden_size=384, num_attention_heads=6, intermediate_size=1536, use_distillation_token=True,
            layer_norm_eps=1e-6,
        ),
        "tiny": dict(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
            patch_size=8,
        ),
    }

    hidden_size: int = 768
    # Blocks in the stack.
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    position_embedding_type: str = "learned"
    norm_position: str = "pre"
    layer_norm_eps: float = 1e-12
    embedding_dropout: float = 0.0
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    image_size: int = 224
    patch_size: int = 16
    num_channels: int = 3
    pooling: str = "cls"
    use_distillation_token: bool = False
    conv_stem: bool = False
    # ViT has no token table: max_position_embeddings is unused (the grid fixes the positions).
    max_position_embeddings: int = 1

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_prefix_tokens(self) -> int:
        return 1 + int(self.use_distillation_token)

    def validate_vit(self):
        if self.num_hidden_layers < 1:
            raise ValueError(f"num_hidden_layers must be positive, got {self.num_hidden_layers}.")
        if self.num_channels < 1:
            raise ValueError(f"num_channels must be positive (3 for RGB, 1 for grey), got {self.num_channels}.")
        if self.patch_size < 1 or self.image_size < self.patch_size or self.image_size % self.patch_size:
            raise ValueError(
                f"image_size ({self.image_size}) must be a positive multiple of patch_size ({self.patch_size})."
            )
        if self.pooling not in VIT_POOLINGS:
            raise ValueError(f"pooling={self.pooling!r}; choose 'cls' or 'mean'.")
        if self.conv_stem and (self.patch_size < 2 or self.patch_size & (self.patch_size - 1)):
            raise ValueError(
                f"conv_stem=True downsamples by 2 per convolution, so patch_size must be a power of 2 >= 2; "
                f"got {self.patch_size}."
            )
        if self.position_embedding_type == "sincos2d" and self.hidden_size % 4:
            raise ValueError(f"sincos2d positions need hidden_size divisible by 4, got {self.hidden_size}.")
