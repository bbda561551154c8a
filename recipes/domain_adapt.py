#!/usr/bin/env python
"""Adapt a pretrained model to Urdu (normalisation, tokenizer statistics, vocabulary extension, continued
pretraining, before/after report and a downstream check). Runs on one CPU, GPUs or several processes:

    accelerate launch recipes/domain_adapt.py                 # all-MiniLM-L6-v2 on a slice of Urdu hadith
    accelerate launch recipes/domain_adapt.py --full          # the long preset
    accelerate launch recipes/domain_adapt.py --help          # every flag

All logic lives in transformer_zoo.training.adaptation.recipe (tested); this file only calls it.
"""

from transformer_zoo.training.adaptation.recipe import main


if __name__ == "__main__":
    main()
