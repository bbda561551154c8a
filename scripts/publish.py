#!/usr/bin/env python
"""Publish a trained transformer-zoo folder to the Hugging Face Hub, after checking it:

    python scripts/publish.py runs/decoder alice/tiny-gpt --dry-run     # checks, the upload list and the card
    python scripts/publish.py runs/decoder alice/tiny-gpt --language en
    python scripts/publish.py runs/lora/adapter alice/tiny-lora --base_model alice/tiny-base

All logic lives in transformer_zoo.publishing (tested); `--help` explains every flag.
"""

from transformer_zoo.publishing import main


if __name__ == "__main__":
    main()
