"""Training: the data side, the loop, and the pretraining, fine-tuning and domain-adaptation recipes.

Subpackages, one per stage:

* `data`: corpora (built-in and a user's files), tokenizer training, pretraining objectives and task features, and
  the order examples are read in;
* `engine`: the training loop, its configuration, checkpoints and resumption, devices, optimisers, evaluation, the
  output folder, and the command-line plumbing the recipes share;
* `pretrain`, `finetune`, `adaptation`: the three recipes (`recipes/*.py` are thin wrappers around their `main()`);
* `reports`: what a run leaves for people (metrics file, trackers, curves, model card).

Import the submodules directly (`from transformer_zoo.training.data.corpora import load_corpus`); this package file
stays light so that importing one part does not pull in the others.

The modules used to sit flat in this package (`transformer_zoo.training.corpora`, ...). Those paths still import,
as the same module objects, with a FutureWarning naming the new path (`MOVED_MODULES`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings


# Old flat module name -> its path inside a stage subpackage.
MOVED_MODULES = {
    "corpora": "data.corpora",
    "builtin_corpora": "data.builtin_corpora",
    "corpus_files": "data.corpus_files",
    "parallel_corpora": "data.parallel_corpora",
    "tokenization": "data.tokenization",
    "objectives": "data.objectives",
    "features": "data.features",
    "data_order": "data.data_order",
    "loop": "engine.loop",
    "checkpointing": "engine.checkpointing",
    "devices": "engine.devices",
    "optim": "engine.optim",
    "output_dir": "engine.output_dir",
    "evaluation": "engine.evaluation",
    "cli": "engine.cli",
    "tasks": "engine.tasks",
    "pretraining": "pretrain.recipe",
    "translation_stage": "pretrain.translation_stage",
    "finetuning": "finetune.recipe",
    "finetuning_data": "finetune.data",
    "finetuning_models": "finetune.models",
    "domain_adaptation": "adaptation.recipe",
    "adaptation_arguments": "adaptation.arguments",
    "adaptation_data": "adaptation.data",
    "adaptation_downstream": "adaptation.downstream",
    "adaptation_measures": "adaptation.measures",
    "adaptation_models": "adaptation.models",
    "adaptation_report": "adaptation.report",
    "embedding_init": "adaptation.embedding_init",
    "vocabulary_extension": "adaptation.vocabulary_extension",
    "reporting": "reports.records",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves `transformer_zoo.training.<old name>` to the module's new home (the same module object, so patches
    and isinstance checks through either name agree). Written here because Python offers no declarative module
    alias; transformers' own deprecated paths are lazy attributes of a package, which cannot serve `import a.b.c`."""

    prefix = __name__ + "."

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.prefix) and fullname[len(self.prefix):] in MOVED_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new_name = f"{__name__}.{MOVED_MODULES[spec.name[len(self.prefix):]]}"
        warnings.warn(f"{spec.name} moved to {new_name}; import it from there (the old path goes in a later release).",
                      FutureWarning, stacklevel=2)
        return importlib.import_module(new_name)

    def exec_module(self, module):
        pass  # the new module was executed when it was imported


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
