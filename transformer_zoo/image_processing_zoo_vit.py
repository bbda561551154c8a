"""Image processor for the ViT family: resize to the model's square input, rescale to [0, 1], normalise.

Built on transformers' PIL backend (no torchvision needed). Defaults are those of the original ViT checkpoints
(bilinear resize to 224, mean = std = 0.5 per channel); set `size`, `image_mean` and `image_std` to match a model
trained otherwise (e.g. ImageNet statistics, or 28 px grayscale with one channel).
"""

from transformers.image_processing_backends import PilBackend
from transformers.image_utils import IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, PILImageResampling


class ZooViTImageProcessor(PilBackend):
    model_input_names = ["pixel_values"]
    resample = PILImageResampling.BILINEAR
    image_mean = IMAGENET_STANDARD_MEAN
    image_std = IMAGENET_STANDARD_STD
    size = {"height": 224, "width": 224}
    do_resize = True
    do_rescale = True
    do_normalize = True


ZooViTImageProcessor.register_for_auto_class("AutoImageProcessor")
