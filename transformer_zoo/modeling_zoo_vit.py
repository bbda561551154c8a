"""Vision Transformer family (Dosovitskiy et al. 2021): patches -> bidirectional zoo stack -> [CLS] or mean pooling.

Options the field ablates: learned or fixed 2-D sine-cosine positions (with interpolation to other image sizes),
[CLS] or mean pooling, DeiT's distillation token (Touvron et al. 2021) and a convolutional stem (Xiao et al. 2021).
Parameter names follow transformers' ViT where one exists, so HF ViT checkpoints convert by a name table.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput
from transformers.utils import can_return_tuple, logging
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_zoo_vit import ZooViTConfig
from .modeling_zoo_checks import check_classification_labels, take_loss_keywords, values_are_checkable
from .modeling_zoo_layers import ZooAttention, ZooBlock, ZooPreTrainedModel
from .modeling_zoo_stack import ZooStackMixin, leading_positions_read
from .modeling_zoo_losses import share_of_accumulated_batch


logger = logging.get_logger(__name__)

# Prepared pixels lie within a few units of 0: rescaled to [0, 1], then normalised (ImageNet's statistics give at most
# (1 - 0.406) / 0.225 = 2.6). Pixels above this were not divided by 255.
UNSCALED_PIXEL_LIMIT = 20.0


def sincos_2d_table(grid_size: int, dim: int) -> torch.Tensor:
    """Fixed 2-D sine-cosine positions (MAE, Moco v3): half the channels encode the row, half the column."""
    coords = torch.arange(grid_size, dtype=torch.float64)
    rows, cols = torch.meshgrid(coords, coords, indexing="ij")
    quarter = dim // 4
    inv_freq = 1.0 / (10000.0 ** (torch.arange(quarter, dtype=torch.float64) / quarter))

    def encode(values):
        angles = values.flatten()[:, None] * inv_freq[None, :]
        return torch.cat([angles.sin(), angles.cos()], dim=1)

    return torch.cat([encode(rows), encode(cols)], dim=1).float()


class ZooPatchEmbedding(nn.Module):
    """Image -> sequence of patch vectors, by one strided convolution or a convolutional stem then a 1x1 projection."""

    def __init__(self, config: ZooViTConfig):
        super().__init__()
        self.patch_size, self.num_channels = config.patch_size, config.num_channels
        if config.conv_stem:
            # log2(patch_size) 3x3 stride-2 convolutions (BN + ReLU), widths doubling up to hidden_size / 2.
            steps = int(math.log2(config.patch_size))
            widths = [config.hidden_size // 2 ** (steps - i) for i in range(steps)]
            layers, in_channels = [], config.num_channels
            for width in widths:
                layers += [
                    nn.Conv2d(in_channels, width, 3, stride=2, padding=1, bias=False),
                    nn.BatchNorm2d(width),
                    nn.ReLU(),
                ]
                in_channels = width
            self.stem = nn.Sequential(*layers)
            self.projection = nn.Conv2d(in_channels, config.hidden_size, kernel_size=1)
        else:
            self.stem = None
            self.projection = nn.Conv2d(
                config.num_channels, config.hidden_size, kernel_size=config.patch_size, stride=config.patch_size
            )

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if pixel_values.ndim != 4 or pixel_values.shape[1] != self.num_channels:
            raise ValueError(
                f"Expected pixel_values of shape [batch, {self.num_channels}, height, width], got "
                f"{tuple(pixel_values.shape)}; use ZooViTImageProcessor to prepare images."
            )
        height, width = pixel_values.shape[-2:]
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(
                f"Image size {height}x{width} is not a multiple of patch_size={self.patch_size}; resize it "
                "(ZooViTImageProcessor does) or crop it."
            )
        features = pixel_values if self.stem is None else self.stem(pixel_values)
        return self.projection(features).flatten(2).transpose(1, 2)


class ZooViTPreTrainedModel(ZooPreTrainedModel):
    config_class = ZooViTConfig
    base_model_prefix = "vit"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    _can_record_outputs = {
        "hidden_states": ZooBlock,
        "attentions": OutputRecorder(ZooAttention, index=1, layer_name="self_attn"),
    }
    AUTO_MAP = {
        "AutoConfig": "configuration_zoo_vit.ZooViTConfig",
        "AutoModel": "modeling_zoo_vit.ZooViTModel",
        "AutoModelForImageClassification": "modeling_zoo_vit.ZooViTForImageClassification",
    }

    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, ZooViTModel):
            std = self.config.initializer_range
            init.trunc_normal_(module.cls_token, std=std)
            if module.dist_token is not None:
                init.trunc_normal_(module.dist_token, std=std)
            if module.position_embeddings is not None:
                init.trunc_normal_(module.position_embeddings, std=std)
            if module.sincos_positions is not None:
                init.copy_(module.sincos_positions, module.compute_sincos_positions())


class ZooViTModel(ZooStackMixin, ZooViTPreTrainedModel):
    def __init__(self, config: ZooViTConfig):
        super().__init__(config)
        self.patch_embeddings = ZooPatchEmbedding(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size)) if config.use_distillation_token else None
        num_positions = config.num_patches + config.num_prefix_tokens
        self.position_embeddings = (
            nn.Parameter(torch.zeros(1, num_positions, config.hidden_size))
            if config.position_embedding_type == "learned"
            else None
        )
        self.sincos_positions = (
            nn.Buffer(self.compute_sincos_positions(), persistent=False)
            if config.position_embedding_type == "sincos2d"
            else None
        )
        # Positions are added here (2-D grid), so the stack itself runs without a position scheme.
        self.build_stack(config, config.num_hidden_layers, is_causal=False, position_scheme="none")
        self.post_init()

    def compute_sincos_positions(self) -> torch.Tensor:
        grid = int(math.isqrt(self.config.num_patches))
        table = sincos_2d_table(grid, self.config.hidden_size)
        prefix = torch.zeros(self.config.num_prefix_tokens, self.config.hidden_size)
        return torch.cat([prefix, table]).unsqueeze(0)

    def get_input_embeddings(self):
        return self.patch_embeddings

    def interpolated_positions(self, table: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Resample the patch part of a position table to a new grid (bicubic, as timm and transformers' ViT)."""
        prefix_count = self.config.num_prefix_tokens
        prefix, patches = table[:, :prefix_count], table[:, prefix_count:]
        old_grid = int(math.isqrt(patches.shape[1]))
        new_height, new_width = height // self.config.patch_size, width // self.config.patch_size
        if (new_height, new_width) == (old_grid, old_grid) and not torch.jit.is_tracing():
            return table
        patches = patches.reshape(1, old_grid, old_grid, -1).permute(0, 3, 1, 2)
        patches = nn.functional.interpolate(
            patches.float(), size=(new_height, new_width), mode="bicubic", align_corners=False
        ).to(table.dtype)
        return torch.cat([prefix, patches.permute(0, 2, 3, 1).reshape(1, new_height * new_width, -1)], dim=1)

    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self, pixel_values: torch.Tensor | None = None, interpolate_pos_encoding: bool = False,
        leading_positions: int | None = None, **kwargs
    ) -> BaseModelOutputWithPooling:
        """leading_positions: compute the last layer for the first positions only (the class and distillation
        tokens), for a caller that reads only those; last_hidden_state then has that many positions (`run_stack`).
        Mean pooling reads every patch and refuses it."""
        if leading_positions is not None and self.config.pooling != "cls":
            raise ValueError(f"leading_positions={leading_positions} cannot be used with pooling="
                             f"{self.config.pooling!r}, which averages every patch; leave it None.")
        if pixel_values is None:
            raise ValueError("pixel_values is required.")
        if not pixel_values.is_floating_point():
            raise ValueError(
                f"pixel_values are {pixel_values.dtype}, not float: raw image bytes have not been prepared. Pass the "
                "images through the model's image processor (ZooViTImageProcessor / AutoImageProcessor), which "
                "resizes, scales to [0, 1] and normalises them.")
        if values_are_checkable(pixel_values) and pixel_values.numel() \
                and max(abs(float(value)) for value in torch.aminmax(pixel_values)) > UNSCALED_PIXEL_LIMIT:
            # A warning, not an error: a model trained on unscaled pixels is the user's to have.
            logger.warning_once(
                f"pixel_values reach beyond {UNSCALED_PIXEL_LIMIT:g}: they look like 0-255 images that were not "
                "rescaled. The model's image processor (ZooViTImageProcessor / AutoImageProcessor) divides by 255 and "
                "normalises them.")
        pixel_values = pixel_values.to(self.patch_embeddings.projection.weight.dtype)
        height, width = pixel_values.shape[-2:]
        patches = self.patch_embeddings(pixel_values)
        batch_size = patches.shape[0]
        prefix = [self.cls_token] + ([self.dist_token] if self.dist_token is not None else [])
        hidden_states = torch.cat([token.expand(batch_size, -1, -1) for token in prefix] + [patches], dim=1)

        table = self.position_embeddings if self.position_embeddings is not None else self.sincos_positions
        if table is not None:
            if table.shape[1] != hidden_states.shape[1] and not interpolate_pos_encoding:
                raise ValueError(
                    f"Input image {height}x{width} gives {patches.shape[1]} patches but the position table was "
                    f"built for {self.config.image_size}x{self.config.image_size} ({self.config.num_patches} "
                    "patches). Pass interpolate_pos_encoding=True to resample the positions, or resize the image."
                )
            if interpolate_pos_encoding:
                table = self.interpolated_positions(table, height, width)
            hidden_states = hidden_states + table.to(hidden_states.dtype)

        hidden_states = self.run_stack(hidden_states, leading_positions=leading_positions, **kwargs)
        if self.config.pooling == "cls":
            pooled = hidden_states[:, 0]
        else:
            pooled = hidden_states[:, self.config.num_prefix_tokens :].mean(dim=1)
        return BaseModelOutputWithPooling(last_hidden_state=hidden_states, pooler_output=pooled)


@dataclass
class ZooImageClassifierOutput(ImageClassifierOutput):
    """transformers' ImageClassifierOutput plus the distillation head's logits (DeiT), None without that token."""

    distillation_logits: torch.FloatTensor | None = None


class ZooViTForImageClassification(ZooViTPreTrainedModel):
    """A linear classifier on the pooled representation. With a distillation token, a second classifier reads it
    and inference averages both heads (DeiT); training returns the class-token loss and exposes both logits.
    """

    def __init__(self, config: ZooViTConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = ZooViTModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.distillation_classifier = (
            nn.Linear(config.hidden_size, config.num_labels) if config.use_distillation_token else None
        )
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        interpolate_pos_encoding: bool = False,
        **kwargs,
    ) -> ZooImageClassifierOutput:
        # A [CLS]-pooled head reads the class (and distillation) tokens only: the last layer computes those rows
        # alone (run_stack).
        labels, _ = take_loss_keywords(self, labels, kwargs)
        leading = None
        if self.config.pooling == "cls":
            leading = leading_positions_read(self.config, kwargs, self.config.num_prefix_tokens)
        outputs = self.vit(pixel_values, interpolate_pos_encoding=interpolate_pos_encoding,
                           leading_positions=leading, **kwargs)
        logits = self.classifier(outputs.pooler_output)
        distillation_logits = None
        if self.distillation_classifier is not None:
            distillation_logits = self.distillation_classifier(outputs.last_hidden_state[:, 1])
            if not self.training:
                logits = (logits + distillation_logits) / 2
        loss = None
        if labels is not None:
            check_classification_labels(labels, self.config, logits.shape[0], kwargs.get("num_items_in_batch"))
            loss = self.loss_function(labels, logits, self.config)
            loss = share_of_accumulated_batch(loss, labels, kwargs.get("num_items_in_batch"))
        return ZooImageClassifierOutput(
            loss=loss,
            logits=logits,
            distillation_logits=distillation_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


ZooViTModel.register_for_auto_class("AutoModel")
ZooViTForImageClassification.register_for_auto_class("AutoModelForImageClassification")
