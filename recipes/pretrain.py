#!/usr/bin/env python
"""Pretrain a transformer-zoo model from scratch. The same script runs on one CPU, GPUs or several processes:

    accelerate launch recipes/pretrain.py                     # small GPT-style decoder on Shakespeare
    accelerate launch recipes/pretrain.py --help              # every flag
    accelerate launch recipes/pretrain.py --config recipes/configs/pretrain-encoder-mlm.yaml

All logic lives in transformer_zoo.training.pretrain.recipe (tested); this file only calls it.
"""

from transformer_zoo.training.pretrain.recipe import main


if __name__ == "__main__":
    main()
