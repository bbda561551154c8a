"""The speed pages' tables: benchmarks/compare_hf.py, throughput_mfu.py, finetune_vs_trainer.py, the allocator
and long-context runs, each from its committed JSON under benchmarks/results."""

from __future__ import annotations

import json
import runpy

from . import ROOT

PEERS = {"gpt2": "GPT-2", "llama": "Llama", "bert": "BERT MLM", "marian": "Marian", "bart": "BART",
         "nanogpt": "nanoGPT-style", "vit": "ViT"}


def speed_table(result_file: str) -> str:
    """The side-by-side table of a benchmarks/compare_hf.py result: step times, speed-up (bold at 1.1 and above),
    the spread of the rounds' speed-ups, and generation (or inference) times."""
    record = json.loads((ROOT / result_file).read_text())
    lines = ["| peer | attention | train step zoo / peer (ms) | train speed-up | the rounds' speed-ups | "
             "generate 64 tokens or infer, zoo / peer (ms) | speed-up |", "|---|---|---|---|---|---|---|"]

    def bold(value):
        return f"**{value:.2f}**" if value >= 1.1 else f"{value:.2f}"

    for row in record["rows"]:
        train = row["train"]
        rounds = [peer / zoo for zoo, peer in zip(train["rounds"]["zoo"], train["rounds"]["peer"])]
        attention = row["attn"] + (f" + compile ({row.get('compile_target', 'model')})" if row["compile"] else "")
        other, kind = (row["generate"], "generate") if "generate" in row else (row.get("infer"), "infer")
        second = (f"{other['zoo_s'] * 1000:.0f} / {other['peer_s'] * 1000:.0f} ({kind}) | {bold(other['speedup'])}"
                  if other else "— | —")
        lines.append(f"| {PEERS.get(row['family'], row['family'])} | {attention} | {train['zoo_s'] * 1000:.0f} / "
                     f"{train['peer_s'] * 1000:.0f} | {bold(train['speedup'])} | {min(rounds):.2f}–{max(rounds):.2f} "
                     f"| {second} |")
    return "\n".join(lines) + "\n"


def _load_average(record: dict) -> str:
    return f"load average {record['load_average_before'][0]:.1f} before, {record['load_average_after'][0]:.1f} after"


def speed_setup(result_file: str) -> str:
    """The setup line of a benchmarks/compare_hf.py result: its command (from the arguments it recorded), versions
    and load."""
    record = json.loads((ROOT / result_file).read_text())
    a = record["args"]
    command = (f"python benchmarks/compare_hf.py --families {a['families']} --attn {a['attn']}"
               + (f" --compile --compile-target {a['compile_target']}" if a.get("compile") else "")
               + f" --rounds {a['rounds']} --steps {a['steps']} --threads {a['threads']}")
    return (f"Command: `{command}`; width {a['hidden']}, {a['layers']} layers, {a['heads']} heads, sequence "
            f"{a['seq_len']}, batch {a['batch_size']}, {a['new_tokens']} generated tokens; torch {record['torch']}, "
            f"transformers {record['transformers']}, {record['threads']} threads, {_load_average(record)} "
            f"(`{result_file}`).\n")


def mfu_table(result_file: str) -> str:
    """benchmarks/throughput_mfu.py's result: tokens per second, MFU and HFU per side, the attention kernel."""
    record = json.loads((ROOT / result_file).read_text())
    lines = ["| peer | tokens/s zoo / peer | speed-up | MFU zoo / peer | HFU zoo / peer | attention kernel (zoo) |",
             "|---|---|---|---|---|---|"]
    for row in record["rows"]:
        zoo, peer = row["zoo"], row["peer"]
        name = PEERS.get(row["family"], row["family"].replace("bert+sparse", "BERT MLM (zoo: sparse_prediction)"))
        kernels = ", ".join(k for k in zoo["attention_kernels"] if "backward" not in k) or "none (math path)"
        lines.append(f"| {name} | {zoo['tokens_per_s']:,.0f} / {peer['tokens_per_s']:,.0f} | {row['speedup']:.2f} | "
                     f"{zoo['mfu'] * 100:.1f} % / {peer['mfu'] * 100:.1f} % | {zoo['hfu'] * 100:.1f} % / "
                     f"{peer['hfu'] * 100:.1f} % | {kernels} |")
    a = record["args"]
    peaks = record.get("peak_flops_before_after") or [record["peak_flops"]]
    lines += ["", "Command: `python benchmarks/throughput_mfu.py "
              f"--precision {a['precision']} --threads {a['threads']} --rounds {a['rounds']} --steps {a['steps']}`; {record['device_name']}, measured dense matmul peak "
              + " and ".join(f"{peak / 1e12:.3f}" for peak in peaks) + f" TFLOP/s (the higher counts); "
              f"{_load_average(record)} (`{result_file}`)."]
    return "\n".join(lines) + "\n"


def end_to_end_table() -> str:
    """benchmarks/finetune_vs_trainer.py: the recipe's default job against the same job with transformers' Trainer,
    the whole job and a 20-step run, medians over alternated runs."""
    columns = (("startup_s", "start-up (s)", ".2f"), ("steady_step_s", "steady step (s)", ".3f"),
               ("between_steps_s", "between steps (s)", ".1f"), ("end_of_run_s", "end of run (s)", ".1f"),
               ("wall_s", "whole run (s)", ".1f"), ("peak_rss_mib", "peak memory (MiB)", ".0f"))
    lines = ["| job | side | " + " | ".join(label for _, label, _ in columns) + " | whole run: Trainer / recipe |",
             "|---|---|" + "---|" * (len(columns) + 1)]
    notes = []
    for result_file, job in (("benchmarks/results/finetune_vs_trainer_full_length_order_cpu.json", "whole job"),
                             ("benchmarks/results/finetune_vs_trainer_length_order_cpu.json", "20 steps")):
        record = json.loads((ROOT / result_file).read_text())
        summary = record["summary"]
        ratio = summary["trainer"]["wall_s"]["median"] / summary["recipe"]["wall_s"]["median"]
        for side in ("recipe", "trainer"):
            # A median of a few milliseconds either way prints as 0.0, not -0.0.
            cells = [format(summary[side][key]["median"] + 0.0 if abs(summary[side][key]["median"]) >= 0.05 else 0.0,
                            spec) for key, _, spec in columns]
            lines.append(f"| {job} | {'recipe' if side == 'recipe' else 'Trainer'} | " + " | ".join(cells)
                         + f" | {f'**{ratio:.2f}**' if side == 'recipe' else ''} |")
        notes.append(f"{job}: {record['args']['pairs']} alternated pairs, {_load_average(record)} (`{result_file}`)")
    return "\n".join(lines) + "\n\n" + "; ".join(notes) + ".\n"


def allocator_table() -> str:
    result_file = "benchmarks/results/allocators_cpu.json"
    record = json.loads((ROOT / result_file).read_text())
    lines = ["| allocator | GPT-2-shaped step zoo / transformers (ms) | ViT-shaped step zoo / transformers (ms) |",
             "|---|---|---|"]
    for name, families in record["variants"].items():
        cells = [f"{families[f]['train_zoo_s'] * 1000:.0f} / {families[f]['train_peer_s'] * 1000:.0f}"
                 for f in ("gpt2", "vit")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n{_load_average(record).capitalize()} (`{result_file}`).\n"


def speed_not_met(result_file: str) -> str:
    """The rows of the latest side-by-side run under the 1.1 target, named from the JSON."""
    record = json.loads((ROOT / result_file).read_text())
    under = [f"{PEERS.get(row['family'], row['family'])} {row['attn']}"
             + (f" + compile ({row.get('compile_target', 'model')})" if row["compile"] else "")
             + f" ({row['train']['speedup']:.2f})" for row in record["rows"] if row["train"]["speedup"] < 1.1]
    generation = [f"{PEERS.get(row['family'], row['family'])} {row['attn']} ({row['generate']['speedup']:.2f})"
                  for row in record["rows"] if "generate" in row and row["generate"]["speedup"] < 1.1]
    return (("Training rows under 1.1 in the latest run: " + ", ".join(under) + "." if under else
             "Every training row of the latest run is at 1.1 or above.") + " "
            + ("Generation rows under 1.1: " + ", ".join(generation) + "." if generation else
               "Every generation row is at 1.1 or above.") + "\n")


def long_context() -> str:
    """benchmarks/long_context.py's sweep: per variant and length, time per token and the step's peak memory; the
    largest length that ran; the quality proxy (and the longer quality run beside it)."""
    record = json.loads((ROOT / "benchmarks" / "results" / "long_context_cpu.json").read_text())
    longer = json.loads((ROOT / "benchmarks" / "results" / "long_context_cpu_quality1000.json").read_text())
    # The table is the benchmark's own (printed after every run), so the page and the script cannot disagree.
    lines = [runpy.run_path(str(ROOT / "benchmarks" / "long_context.py"))["format_table"](record)]
    quality = {name: variant["quality"]["eval_loss"] for name, variant in longer["variants"].items()
               if "eval_loss" in variant.get("quality", {})}
    lines += ["", f"(Each cell: forward + backward time per token, peak memory of the step.) Torch {record['torch']}, "
              f"{record['threads']} thread; load average {record['load_average_at_start'][0]:.1f} at the start and "
              f"{record['load_average_at_end'][0]:.1f} at the end (the machine was shared, which is why single-thread "
              f"timings were used); the command took {record['wall_seconds'] / 60:.1f} min "
              "(`benchmarks/results/long_context_cpu.json`). The longer quality run "
              f"({longer['quality_steps']} steps, `benchmarks/results/long_context_cpu_quality1000.json`): "
              + ", ".join(f"{name} {loss:.3f}" for name, loss in quality.items()) + "."]
    return "\n".join(lines) + "\n"


def generation_checks() -> str:
    result_file = "benchmarks/results/compare_hf_generation_input_checks_cpu.json"
    record = json.loads((ROOT / result_file).read_text())
    rows = ", ".join(f"{PEERS.get(row['family'], row['family'])} {row['generate']['speedup']:.2f}×"
                     for row in record["rows"] if "generate" in row)
    return f"Generation with the checks, against transformers ({_load_average(record)}, `{result_file}`): {rows}.\n"


def beam_search_cache() -> str:
    result_file = "benchmarks/results/beam_search_cache_cpu.json"
    record = json.loads((ROOT / result_file).read_text())
    setup = record["setup"]
    lines = ["| source tokens | transformers' reordering (s) | self-attention cache only (s) | speed-up |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {row['source_length']} | {row['both_caches_s']:.3f} | {row['self_attention_only_s']:.3f} | "
              f"{row['speedup']:.2f}× |" for row in record["rows"]]
    load = (f"load average {setup['load_average_start'][0]:.1f} at the start, {setup['load_average_end'][0]:.1f} at "
            "the end")
    return ("\n".join(lines) + f"\n\nOne generate call of {setup['batch_size']} sources × {setup['num_beams']} beams, "
            f"{setup['new_tokens']} new tokens, {setup['model']}; median of {setup['rounds']} alternating rounds, "
            f"{setup['threads']} thread, torch {setup['torch']}, transformers {setup['transformers']}; {load}; "
            f"tokens and scores identical (`{result_file}`, `{setup['command']}`).\n")
