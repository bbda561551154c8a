"""The training loop's configuration: one dataclass with every setting of a run, and what it checks on
construction. Its own module so that the loop and the device set-up (devices.py) both read it without importing
each other."""

from __future__ import annotations

from dataclasses import dataclass, fields

LOWER_IS_BETTER = ("loss", "perplexity", "bits_per_byte")


@dataclass
class TrainingConfig:
    """Everything the loop needs to know about a run. Defaults are the classic choices (AdamW 0.9/0.999/1e-8,
    weight decay 0.01 except biases and norms, linear warmup then decay, clipping at 1.0).
    """

    output_dir: str = "outputs/run"
    # Length: optimiser steps when max_steps is set, else num_epochs passes over the training set.
    max_steps: int | None = None
    num_epochs: float = 1.0
    # Examples per process per forward pass; the global batch is this x processes x gradient_accumulation_steps.
    per_device_batch_size: int = 8
    # Token-count batches instead (Vaswani et al. 5.1; fairseq's --max-tokens): each micro-batch holds as many
    # examples as fit this many padded tokens per process (the longer of input and labels x rows). None = off.
    max_tokens_per_batch: int | None = None
    gradient_accumulation_steps: int = 1
    eval_batch_size: int | None = None  # None = per_device_batch_size
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    lr_scheduler: str = "linear"  # linear | cosine | inverse_sqrt | constant (see optim.SCHEDULES)
    warmup_steps: int | None = None  # None = warmup_ratio of the run
    warmup_ratio: float = 0.0
    max_grad_norm: float | None = 1.0  # None or 0 = no clipping (the norm is still logged)
    label_smoothing: float = 0.0
    mixed_precision: str = "no"  # no | bf16 | fp16 (Accelerate autocast; fp16 adds a gradient scaler)
    seed: int = 42
    shuffle: bool = True
    logging_steps: int = 10
    eval_steps: int | None = None  # None = evaluate at the end only
    save_steps: int | None = None  # None = no intermediate checkpoints
    save_total_limit: int = 2  # checkpoints kept (the newest ones)
    resume: bool | str = False  # True = the newest checkpoint in output_dir, or a checkpoint folder
    early_stopping_metric: str = "eval_loss"
    greater_is_better: bool | None = None  # None = False for losses and perplexity, True otherwise
    early_stopping_patience: int | None = None  # evaluations without improvement before stopping; None = never
    load_best_at_end: bool = True
    report_to: str = "auto"  # auto (TensorBoard when installed) | none | comma list of Accelerate trackers
    run_name: str = "transformer-zoo"
    progress_bar: bool = True
    throughput_unit: str = "tokens"  # tokens | images: what the progress bar and the log count per second
    cpu: bool = False  # force the CPU even where a GPU exists
    # Intra-op CPU threads per process: None leaves torch's setting; "auto" = the cores this process may use divided
    # by the processes on this machine (`accelerate launch` otherwise sets OMP_NUM_THREADS=1 on GPU-less machines).
    cpu_threads: int | str | None = None
    # torch.compile the training loss, model included (devices.training_loss): "auto" = on a GPU only (on CPU the
    # compiled step was no faster than the zoo's eager one), or True / False.
    compile: bool | str = "auto"

    def __post_init__(self):
        if self.per_device_batch_size < 1 or self.gradient_accumulation_steps < 1:
            raise ValueError("per_device_batch_size and gradient_accumulation_steps must be >= 1.")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}.")
        if self.max_tokens_per_batch is not None and self.max_tokens_per_batch < 1:
            raise ValueError(f"max_tokens_per_batch must be >= 1 (or None), got {self.max_tokens_per_batch}.")
        if self.compile not in (True, False, "auto"):
            raise ValueError(f"compile must be true, false or auto, got {self.compile!r}.")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError(f"mixed_precision must be no, bf16 or fp16, got {self.mixed_precision!r}.")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}.")
        if self.max_grad_norm is not None and not self.max_grad_norm >= 0:
            # clip_grad_norm_ would scale every gradient by a negative factor: the step would ascend the loss.
            raise ValueError(f"max_grad_norm must be >= 0 (None or 0: no clipping), got {self.max_grad_norm}.")
        if not (0.0 <= self.adam_beta1 < 1.0 and 0.0 <= self.adam_beta2 < 1.0 and self.adam_epsilon > 0):
            raise ValueError(f"AdamW needs betas in [0, 1) and epsilon > 0, got adam_beta1={self.adam_beta1}, "
                             f"adam_beta2={self.adam_beta2}, adam_epsilon={self.adam_epsilon}.")
        if self.throughput_unit not in ("tokens", "images"):
            raise ValueError(f"throughput_unit must be tokens or images, got {self.throughput_unit!r}.")

    @classmethod
    def from_dict(cls, values: dict) -> "TrainingConfig":
        """Build from a dict that may hold other keys too (e.g. all of a recipe's parsed arguments)."""
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in names})

    def metric_greater_is_better(self) -> bool:
        if self.greater_is_better is not None:
            return self.greater_is_better
        return not any(word in self.early_stopping_metric for word in LOWER_IS_BETTER)
