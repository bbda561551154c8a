"""Machine translation around the zoo's encoder-decoder: the pieces of Vaswani et al.'s set-up that transformers and
its neighbours do not provide as a library, each small and tested.

* `batching`: token-count batches (Vaswani et al. 5.1: "each training batch contained ... approximately 25000 source
  tokens and 25000 target tokens"), built from length-sorted buckets;
* `averaging`: averaging the weights of the last checkpoints (section 6.1), over safetensors files;
* `decoding`: batched beam search over a list of sentences through the model's `generate()`;
* `scoring`: sacreBLEU BLEU and chrF with their signatures;
* `baselines`: copying the source, and retrieving the target of the most similar training source (TF-IDF).
"""

from .averaging import average_checkpoints, average_state_dicts
from .baselines import RetrievalBaseline, copy_baseline
from .batching import token_batches
from .decoding import load_decoding_defaults, save_decoding_defaults, sentence_splitter, translate
from .scoring import corpus_scores

__all__ = ["RetrievalBaseline", "average_checkpoints", "average_state_dicts", "copy_baseline", "corpus_scores",
           "load_decoding_defaults", "save_decoding_defaults", "sentence_splitter", "token_batches", "translate"]
