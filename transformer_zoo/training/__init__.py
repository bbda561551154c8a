"""Training utilities: corpora, tokenizers, objectives and task features (data side) and the training loop and recipes.

Import the submodules directly (`from transformer_zoo.training.corpora import load_corpus`); this package file stays
light so that importing one part does not pull in the others.
"""
