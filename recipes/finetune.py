#!/usr/bin/env python
"""Fine-tune a model (full, LoRA or frozen backbone). The same script runs on one CPU, GPUs or several processes:

    accelerate launch recipes/finetune.py                     # all-MiniLM-L6-v2 + LoRA on hadith-en
    accelerate launch recipes/finetune.py --help              # every flag
    accelerate launch recipes/finetune.py --config recipes/configs/finetune-minilm-hadith-lora.yaml --seeds 1,2,3

All logic lives in transformer_zoo.training.finetune.recipe (tested); this file only calls it.
"""

from transformer_zoo.training.finetune.recipe import main


if __name__ == "__main__":
    main()
