"""The data side of training: corpora (built-in, a user's files, parallel text), tokenizer training, the pretraining
objectives and fine-tuning task features, and the order the loop reads examples in.
"""
