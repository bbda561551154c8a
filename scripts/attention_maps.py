"""Draw every head's attention map of a zoo model and tabulate per-head statistics (entropy, mean attention
distance, similarity to the other heads of its layer).

    python scripts/attention_maps.py outputs/finetune --text "The quick brown fox" --output-dir outputs/attention
    python scripts/attention_maps.py zoo_decoder:tiny --token-ids 5,17,42,8,99 --output-dir /tmp/attention

    python scripts/attention_maps.py outputs/finetune-vit-digits --digit 7 --output-dir /tmp/vit-attention

A folder is loaded with its weights and tokenizer (or image processor); family:preset builds the preset with random
weights (a demo of the tools, not of anything learned). Writes <stack>_layer<L>_head<H>.png per head, plus
head_statistics.csv and head_statistics.md. For a ViT it also writes vit_cls_attention.png: the image the model saw
with the [CLS] token's attention over the patches laid on top (attention rollout, Abnar & Zuidema 2020, or the last
layer's [CLS] row), upsampled to the image size.
"""

import argparse
import sys
from pathlib import Path

# torch, transformers and transformer_zoo are imported inside the functions that need them: importing the package
# takes seconds, and --help or an argument error should answer at once.


def parse_arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="A saved zoo model folder, or family:preset (e.g. zoo_encoder:tiny) built with "
                                      "random weights.")
    inputs = parser.add_mutually_exclusive_group()
    inputs.add_argument("--text", help="Input text, tokenized with the tokenizer of --tokenizer or the model folder.")
    inputs.add_argument("--token-ids", help="Input token ids, comma-separated (e.g. 5,17,42). Default for a preset: "
                                            "8 random ids.")
    parser.add_argument("--target-text", help="Encoder-decoder only: decoder input text (default: the source).")
    parser.add_argument("--target-token-ids", help="Encoder-decoder only: decoder input ids, comma-separated "
                                                   "(default: the source ids).")
    parser.add_argument("--tokenizer", help="Tokenizer folder or id (default: the model folder).")
    parser.add_argument("--output-dir", default="outputs/attention", help="Folder for the PNGs and tables "
                                                                           "(default outputs/attention).")
    parser.add_argument("--layers", help="Comma-separated layer indices to draw (default: all). Statistics always "
                                         "cover every layer.")
    images = parser.add_mutually_exclusive_group()
    images.add_argument("--image", help="ViT only: an image file (PNG/JPEG...), prepared with the folder's image "
                                        "processor (or resized to the model's image_size).")
    images.add_argument("--digit", type=int, default=0, help="ViT only, without --image: index of the "
                                                              "scikit-learn load_digits image to use (default 0).")
    parser.add_argument("--cls-method", choices=("rollout", "last"), default="rollout",
                        help="ViT only: how the [CLS] heat-map is computed: attention rollout through all layers "
                             "(default) or the last layer's [CLS] attention averaged over heads.")
    parser.add_argument("--seed", type=int, default=0, help="Seed for random preset weights and ids.")
    return parser.parse_args(argv)


def load_model(spec: str):
    from transformers import AutoModel
    from transformer_zoo.modeling_zoo_checks import read_model_config

    import transformer_zoo as tz

    if Path(spec).exists():
        # Load with the class the folder was saved as (e.g. a fine-tuned classifier), then take its bare stack:
        # AutoModel on a head checkpoint would drop the head's weights and print transformers' LOAD REPORT
        # ("classifier.weight UNEXPECTED"), which reads as an error although the maps need only the stack.
        config = read_model_config(spec)
        architecture = (config.architectures or [None])[0]
        registered = tz.FAMILIES.get(config.model_type, (None, []))[1]
        model_class = next((cls for _, cls in registered if cls.__name__ == architecture), AutoModel)
        return model_class.from_pretrained(spec).base_model, spec
    family, _, preset = spec.partition(":")
    if family not in tz.FAMILIES or not preset:
        raise SystemExit(f"{spec!r} is neither an existing folder nor family:preset with family in "
                         f"{', '.join(tz.FAMILIES)}.")
    config_class, models = tz.FAMILIES[family]
    if preset not in config_class.PRESETS:
        raise SystemExit(f"Unknown preset {preset!r}; choose one of {', '.join(config_class.preset_names())}.")
    base_model_class = models[0][1]  # the AutoModel entry: the bare stack, where the attention lives
    return base_model_class(config_class.from_preset(preset)), None


def parse_ids(text: str) -> list[int]:
    return [int(value) for value in text.replace(" ", "").split(",") if value]


def load_image(args, config, folder):
    """[1, channels, size, size] pixel values of --image or a load_digits image, prepared as the model expects."""
    from PIL import Image
    from transformers import AutoImageProcessor

    from transformer_zoo import ZooViTImageProcessor

    if args.image is not None:
        if not Path(args.image).is_file():
            raise SystemExit(f"--image {args.image!r} is not a file.")
        image = Image.open(args.image)
    else:
        import numpy as np
        from sklearn.datasets import load_digits

        digits = load_digits().images
        if not 0 <= args.digit < len(digits):
            raise SystemExit(f"--digit {args.digit}: choose an index in 0..{len(digits) - 1}.")
        image = Image.fromarray((digits[args.digit] * (255 / 16)).astype(np.uint8), mode="L")
    image = image.convert("RGB" if config.num_channels == 3 else "L")
    processor = None
    if folder is not None and (Path(folder) / "preprocessor_config.json").exists():
        processor = AutoImageProcessor.from_pretrained(folder)
    if processor is None:
        processor = ZooViTImageProcessor(size={"height": config.image_size, "width": config.image_size})
    return processor(image, return_tensors="pt")["pixel_values"]


def build_inputs(args, model, folder):
    """Forward kwargs and the token labels of each stack's queries/keys."""
    import torch

    from transformer_zoo.training.data.tokenization import load_tokenizer

    config = model.config
    if config.model_type == "zoo_vit":
        pixels = load_image(args, config, folder)
        prefix = ["[CLS]"] + (["[DIST]"] if getattr(config, "use_distillation_token", False) else [])
        labels = prefix + [f"p{i}" for i in range(config.num_patches)]
        return {"pixel_values": pixels}, {"self": (labels, labels)}
    tokenizer = None
    if args.text is not None or args.target_text is not None:
        source = args.tokenizer or folder
        if source is None:
            raise SystemExit("--text needs a tokenizer: pass --tokenizer, or a model folder that holds one.")
        try:
            tokenizer = load_tokenizer(args.tokenizer, folder, model_flag="the model folder")
        except ValueError as error:
            raise SystemExit(str(error)) from None
    if args.text is not None:
        ids = tokenizer(args.text)["input_ids"]
    elif args.token_ids is not None:
        ids = parse_ids(args.token_ids)
    else:
        ids = torch.randint(3, config.vocab_size, (8,)).tolist()

    def labels_of(token_ids):
        if tokenizer is not None:
            return tokenizer.convert_ids_to_tokens(token_ids)
        return [str(i) for i in token_ids]

    inputs = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    if config.model_type != "zoo_seq2seq":
        return inputs, {"self": (labels_of(ids), labels_of(ids))}
    if args.target_text is not None:
        target = tokenizer(args.target_text)["input_ids"]
    elif args.target_token_ids is not None:
        target = parse_ids(args.target_token_ids)
    else:
        target = ids
    inputs["decoder_input_ids"] = torch.tensor([target])
    source_labels, target_labels = labels_of(ids), labels_of(target)
    return inputs, {"encoder_self": (source_labels, source_labels), "decoder_self": (target_labels, target_labels),
                    "cross": (target_labels, source_labels)}


def main(argv=None):
    args = parse_arguments(argv)
    import torch

    from transformer_zoo.analysis.attention import (
        capture_attentions,
        cls_attention_map,
        head_statistics_table,
        plot_attention_map,
        plot_cls_attention_overlay,
        table_markdown,
        write_table_csv,
    )

    torch.manual_seed(args.seed)
    model, folder = load_model(args.model)
    inputs, token_labels = build_inputs(args, model, folder)
    attentions = capture_attentions(model, inputs)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    selected_layers = None if args.layers is None else set(parse_ids(args.layers))
    deepest = max(weights.shape[0] for weights in attentions.values())
    if selected_layers and not selected_layers <= set(range(deepest)):
        missing = sorted(selected_layers - set(range(deepest)))
        raise SystemExit(f"--layers {args.layers}: the model has layers 0..{deepest - 1}, not "
                         f"{', '.join(map(str, missing))}.")
    rows, written = [], 0
    for stack, weights in attentions.items():
        tokens_q, tokens_k = token_labels[stack]
        for row in head_statistics_table(weights):
            rows.append({"stack": stack, **row})
        for layer in range(weights.shape[0]):
            if selected_layers is not None and layer not in selected_layers:
                continue
            for head in range(weights.shape[2]):
                plot_attention_map(weights[layer, 0, head], tokens_q, tokens_k,
                                   output_dir / f"{stack}_layer{layer}_head{head}.png",
                                   title=f"{stack} layer {layer} head {head}")
                written += 1
    if model.config.model_type == "zoo_vit":
        heatmap = cls_attention_map(attentions["self"], model.config.num_prefix_tokens, method=args.cls_method)[0]
        source = args.image or f"load_digits image {args.digit}"
        plot_cls_attention_overlay(inputs["pixel_values"][0], heatmap, output_dir / "vit_cls_attention.png",
                                   title=f"[CLS] attention ({args.cls_method}) on {Path(source).name}")
        written += 1
    write_table_csv(rows, output_dir / "head_statistics.csv")
    markdown = table_markdown(rows)
    (output_dir / "head_statistics.md").write_text(markdown)
    print(markdown)
    print(f"Wrote {written} heat-maps and head_statistics.csv/.md to {output_dir}")


if __name__ == "__main__":
    sys.exit(main())
