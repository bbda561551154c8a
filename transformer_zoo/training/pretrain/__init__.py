"""The pretraining recipe (`recipes/pretrain.py`): a model from scratch on a corpus, with the translation stage of
Vaswani et al.'s set-up (checkpoint averaging, beam search, BLEU against baselines).
"""
