"""Export zoo models where zoo code does not run: transformers' native classes, PEFT adapters for them, and GGUF.

    from transformer_zoo.export import export_checkpoint, export_model, choose_format
    export_checkpoint("runs/zoo-gpt2", "out/gpt2")            # auto: the architecture that expresses it exactly

The command line is scripts/export_checkpoint.py; docs/deploy.md has the table of which zoo configs export where.
"""

from .native import (
    EXPORT_FORMATS,
    EXPORT_TARGETS,
    UnsupportedExportError,
    choose_format,
    export_checkpoint,
    export_model,
    export_problems,
    save_export,
    zoo_class_for_folder,
)


__all__ = [
    "EXPORT_FORMATS",
    "EXPORT_TARGETS",
    "UnsupportedExportError",
    "choose_format",
    "export_checkpoint",
    "export_model",
    "export_problems",
    "save_export",
    "zoo_class_for_folder",
]
