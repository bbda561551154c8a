"""The tables quoted between `<!-- rendered: NAME -->` and `<!-- /rendered -->` in any page: NAME -> the function
that renders it from committed results."""

from __future__ import annotations

import importlib
import re

from . import DOCS, speed, training, translation, urdu

# A page quotes a rendered table between `<!-- rendered: NAME -->` and `<!-- /rendered -->`; render_docs rewrites
# what is between them from the committed result file the function reads.
FRAGMENT = re.compile(r"(<!-- rendered: ([\w-]+) -->\n)(.*?)(<!-- /rendered -->)", re.S)
LATEST_SPEED = "benchmarks/results/compare_hf_kept_memory_cpu.json"  # the speed page's headline run


FRAGMENTS = {
    "time-to-quality": training.time_to_quality,
    "time-to-quality-sweep": training.time_to_quality_sweep,
    "pretrain-default": training.pretrain_default,
    "speed-latest": lambda: speed.speed_table(LATEST_SPEED),
    "speed-latest-setup": lambda: speed.speed_setup(LATEST_SPEED),
    "speed-not-met": lambda: speed.speed_not_met(LATEST_SPEED),
    "speed-mfu": lambda: speed.mfu_table("benchmarks/results/throughput_mfu_cpu.json"),
    "speed-mfu-bf16": lambda: speed.mfu_table("benchmarks/results/throughput_mfu_cpu_bf16.json"),
    "speed-end-to-end": speed.end_to_end_table,
    "speed-allocators": speed.allocator_table,
    "translation-results": translation.translation_table,
    "translation-notes": translation.translation_notes,
    "long-context": speed.long_context,
    "max-length-study": training.max_length_study,
    "generation-checks": speed.generation_checks,
    "beam-search-cache": speed.beam_search_cache,
    "translation-table3": translation.translation_table3,
    # The Urdu study's own report (benchmarks/urdu_adaptation_report.py writes it from study.json).
    "urdu-study-arms": lambda: urdu.markdown_tables((DOCS / "urdu" / "study.md").read_text())[0] + "\n",
    "urdu-study-gains": lambda: urdu.markdown_tables((DOCS / "urdu" / "study.md").read_text())[1] + "\n",
    "urdu-study-findings": urdu.urdu_findings,
    "parameter-counts": lambda: importlib.import_module("transformer_zoo.analysis.parameter_counts").markdown_table(),
    "urdu-convergence": urdu.urdu_convergence,
    "urdu-protocol-change": urdu.urdu_protocol_change,
    "urdu-default-runs": urdu.urdu_default_runs,
}


def with_fragments(text: str) -> str:
    def replace(match):
        if match.group(2) not in FRAGMENTS:
            raise KeyError(f"unknown rendered fragment {match.group(2)!r}; known: {', '.join(FRAGMENTS)}")
        return match.group(1) + FRAGMENTS[match.group(2)]() + match.group(4)

    return FRAGMENT.sub(replace, text)
