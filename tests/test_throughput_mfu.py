"""benchmarks/throughput_mfu.py: the FLOPs it counts against a count by hand, its tokens/s and MFU arithmetic, and that
under bf16 autocast every family's attention reaches SDPA's flash kernel with bfloat16 inputs on both sides (on a GPU
the flash kernel takes nothing else, so a float32 query there would make --sdpa-backend flash fail)."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("throughput_mfu", ROOT / "benchmarks" / "throughput_mfu.py")
throughput = importlib.util.module_from_spec(spec)
spec.loader.exec_module(throughput)
compare_hf = throughput.compare_hf

TINY = ["--hidden", "64", "--layers", "2", "--heads", "2", "--seq-len", "32", "--batch-size", "2", "--vocab-size",
        "1000", "--image-size", "32", "--patch-size", "8", "--rounds", "1", "--steps", "1", "--warmup", "0",
        "--peak-size", "256", "--peak-repeats", "2"]


def gpt2_training_step_flops(batch: int, seq: int, d: int, layers: int, vocab: int) -> int:
    """Multiply-adds x 2 of a GPT-2 forward, times 3 for the backward (each product's input and weight gradients):
    per layer q/k/v (d -> 3d), the output projection, the MLP (d -> 4d -> d) and attention's two (seq x seq) products
    per sequence; then the vocabulary projection. Causal attention is counted over the whole square, as PyTorch's
    flop counter does."""
    tokens = batch * seq
    per_layer = 2 * tokens * d * (3 * d + d + 4 * d + 4 * d) + 2 * 2 * batch * seq * seq * d
    return 3 * (layers * per_layer + 2 * tokens * d * vocab)


def test_counted_flops_tokens_and_mfu_of_a_run(tmp_path):
    output = tmp_path / "throughput.json"
    throughput.main(["--families", "gpt2,bert", *TINY, "--output", str(output)])
    record = json.loads(output.read_text())
    assert output.with_suffix(".png").is_file() and record["peak_flops"] == max(record["peak_flops_before_after"]) > 0
    gpt2, bert = record["rows"]
    hand = gpt2_training_step_flops(batch=2, seq=32, d=64, layers=2, vocab=1000)
    assert gpt2["peer"]["flops"] == hand and gpt2["model_flops_per_step"] == hand
    assert gpt2["zoo"]["flops"] == hand  # the zoo decoder does the same arithmetic as GPT-2
    # The zoo's masked LM projects and backpropagates the labelled rows only: fewer FLOPs executed, and the same
    # model FLOPs (the peer's count) in its MFU.
    assert bert["zoo"]["flops"] < bert["peer"]["flops"] == bert["model_flops_per_step"]
    for row in (gpt2, bert):
        assert row["tokens_per_step"] == 2 * 32
        for side in ("zoo", "peer"):
            seconds = row[side]["step_s"]
            assert row[side]["tokens_per_s"] == pytest.approx(64 / seconds)
            assert row[side]["mfu"] == pytest.approx(row["model_flops_per_step"] / seconds / record["peak_flops"])
            assert row[side]["hfu"] == pytest.approx(row[side]["flops"] / seconds / record["peak_flops"])
        assert row["speedup"] == pytest.approx(row["peer"]["step_s"] / row["zoo"]["step_s"])
    assert "| GPT-2 |" in throughput.format_table(record)


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert", "marian", "bart", "vit", "nanogpt"])
def test_bf16_autocast_reaches_the_flash_kernel_in_bfloat16_on_both_sides(family):
    """Dropout off (eval mode): PyTorch's CPU SDPA takes its flash kernel then, as a GPU's does with dropout."""
    args = throughput.parse_args(["--families", family, *TINY])
    torch.manual_seed(0)
    zoo, peer, batch = compare_hf.build_pair(family, args, "sdpa")
    for model in (zoo, peer):
        model.eval()
        counter = throughput.StepCounter()
        with counter, throughput.precision_context(torch.device("cpu"), "bf16-mixed"):
            compare_hf.loss_of(model, batch).backward()
        assert counter.attention_kernels == {"flash_attention_for_cpu[bfloat16]",
                                             "flash_attention_for_cpu_backward[bfloat16]"}, type(model).__name__


def test_refusals_name_the_fix(capsys):
    with pytest.raises(SystemExit):
        throughput.parse_args(["--families", "gpt2,gpt3"])
    assert "unknown gpt3" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--sdpa-backend auto on a CPU"):
        throughput.main(["--sdpa-backend", "flash", *TINY])
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="no CUDA device"):
            throughput.main(["--device", "cuda", *TINY])
