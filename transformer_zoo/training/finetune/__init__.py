"""The fine-tuning recipe (`recipes/finetune.py`): a zoo or transformers checkpoint on a labelled task, full or with
LoRA/PEFT, its task data and task models.
"""
