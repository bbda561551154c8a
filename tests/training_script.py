"""A small, deterministic use of `transformer_zoo.training.engine.loop.train`, run as a subprocess by the tests (resume after
SIGKILL, several processes under `accelerate launch`). Not a test module itself.

    python tests/training_script.py OUTPUT_DIR [--max_steps N] [--per_device_batch_size B] [--save_steps S]
                                    [--resume] [--dropout P]

Trains a tiny zoo decoder on fixed random token sequences and writes, per process, the SHA-256 of its final weights
to OUTPUT_DIR/weights-rank<r>.txt.
"""

import argparse
import hashlib
import os
import sys

import torch

from transformer_zoo import ZooDecoderConfig, ZooDecoderForCausalLM
from transformer_zoo.training.engine.devices import create_accelerator
from transformer_zoo.training.engine.evaluation import evaluate
from transformer_zoo.training.engine.loop import TrainingConfig, train


def weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--per_device_batch_size", type=int, default=8)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=1)
    parser.add_argument("--save_steps", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--length", type=int, default=64)
    args = parser.parse_args()

    torch.set_num_threads(1)
    config = TrainingConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_batch_size=args.per_device_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps, save_steps=args.save_steps,
        resume=args.resume, logging_steps=1, eval_steps=10, learning_rate=2e-3, warmup_steps=4,
        lr_scheduler="cosine", report_to="none", progress_bar=False, seed=3,
    )
    accelerator = create_accelerator(config)
    torch.manual_seed(0)
    model_config = ZooDecoderConfig.from_preset(
        "tiny", embedding_dropout=args.dropout, attention_dropout=args.dropout, hidden_dropout=args.dropout,
        attn_implementation="eager",
    )
    model = ZooDecoderForCausalLM(model_config)
    generator = torch.Generator().manual_seed(1)
    # A learnable pattern (each sequence counts up from a random start) so the loss falls visibly.
    starts = torch.randint(3, 900, (128,), generator=generator)
    data = [{"input_ids": (start + torch.arange(args.length)) % 997 + 3} for start in starts]
    validation = data[:16]

    def collate(examples):
        input_ids = torch.stack([example["input_ids"] for example in examples])
        return {"input_ids": input_ids, "labels": input_ids.clone()}

    def eval_fn(model):
        return evaluate(model, validation, collate, accelerator=accelerator, batch_size=8, perplexity=True)

    result = train(model, data, collate, config, eval_fn=eval_fn, accelerator=accelerator)
    with open(os.path.join(args.output_dir, f"weights-rank{accelerator.process_index}.txt"), "w") as handle:
        handle.write(weights_digest(result.model))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        print(f"finished {result.progress.step} steps", file=sys.stderr)


if __name__ == "__main__":
    main()
