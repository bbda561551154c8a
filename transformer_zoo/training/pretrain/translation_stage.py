"""The translation stage of the pretraining recipe (Vaswani et al. 2017's set-up): averaging the last checkpoints,
and the test-set translation scored against the raw references, with the copy and retrieval baselines."""

from __future__ import annotations

from pathlib import Path


def check_averaging(args) -> None:
    """--average_last needs the checkpoints it averages, and cannot be combined with reloading the best model."""
    if args.average_last < 1:
        raise ValueError(f"--average_last must be at least 1, got {args.average_last}.")
    if args.average_last == 1:
        return
    if args.family != "seq2seq":
        raise ValueError("--average_last applies to the seq2seq family (translation, denoising).")
    if args.load_best_at_end:
        raise ValueError("--average_last > 1 replaces the final model by an average of the last checkpoints, which "
                         "--load_best_at_end would override: pass --load_best_at_end false.")
    if not args.save_steps:
        raise ValueError("--average_last needs checkpoints: set --save_steps (the steps between averaged "
                         "checkpoints).")
    if args.save_total_limit and args.save_total_limit < args.average_last - 1:
        raise ValueError(f"--average_last {args.average_last} needs --save_total_limit >= {args.average_last - 1} "
                         f"(the final weights and that many checkpoints; it is {args.save_total_limit}, so older "
                         "checkpoints would be deleted).")


def average_last_checkpoints(model, output_dir: Path, count: int) -> list[str]:
    """Load into `model` the average of its final weights and the newest `count - 1` checkpoints under
    output_dir/checkpoints (the loop writes no checkpoint at the last step: the final weights are the model itself).
    Returns the names of what was averaged."""
    from safetensors.torch import load_file

    from ...translation import average_state_dicts
    from ...translation.averaging import weights_file
    from ..engine.checkpointing import list_checkpoints

    checkpoints = list_checkpoints(output_dir / "checkpoints")[-(count - 1):]
    if len(checkpoints) < count - 1:
        raise ValueError(f"--average_last {count}: only {len(checkpoints)} checkpoints besides the final weights "
                         "were written; lower --save_steps or --average_last.")
    saved = [load_file(str(weights_file(path))) for path in checkpoints]
    own = model.state_dict()
    final = {name: own[name].detach().cpu() for name in saved[0]}  # the names a checkpoint stores (tied once)
    state = average_state_dicts([*saved, final])
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Checkpoints store each tied tensor once (safetensors): a missing name must share its storage with a loaded one.
    loaded_storage = {own[name].data_ptr() for name in state if name in own}
    tied = {name for name in missing if own[name].data_ptr() in loaded_storage}
    if unexpected or set(missing) - tied:
        raise ValueError(f"The averaged checkpoints do not match the model (missing {sorted(set(missing) - tied)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]}).")
    model.tie_weights()
    return [path.name for path in checkpoints] + ["final"]


def translation_test(model, tokenizer, corpus, args) -> dict:
    """Test BLEU and chrF of beam search against the raw references (not the truncated, re-decoded labels), with the
    copy and retrieval baselines on the same sentences."""
    from ...translation import (
        RetrievalBaseline,
        copy_baseline,
        corpus_scores,
        translate,
    )

    test = corpus["test"].select(range(min(args.generation_examples, len(corpus["test"]))))
    sources, references = list(test["source"]), list(test["target"])
    hypotheses = translate(model, tokenizer, sources, num_beams=args.num_beams, length_penalty=args.length_penalty,
                           batch_size=args.eval_batch_size or args.per_device_batch_size,
                           max_source_tokens=args.context_length)
    scores = corpus_scores(hypotheses, references)
    retrieval = RetrievalBaseline(corpus["train"]["source"], corpus["train"]["target"]).translate(sources)
    copy_scores, retrieval_scores = corpus_scores(copy_baseline(sources), references), corpus_scores(retrieval,
                                                                                                      references)
    return {"bleu": scores["bleu"], "chrf": scores["chrf"], "copy_bleu": copy_scores["bleu"],
            "copy_chrf": copy_scores["chrf"], "retrieval_bleu": retrieval_scores["bleu"],
            "retrieval_chrf": retrieval_scores["chrf"], "sacrebleu_signature": scores["bleu_signature"],
            "translated_sentences": len(sources)}
