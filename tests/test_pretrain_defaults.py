"""The pretraining recipe's per-family defaults: a flag left unset takes its family's value (the decoder's chosen by
the time-to-quality benchmark), a value given on the command line or in --config is kept, and a family that does not
read a flag is not told that an unset flag "would be ignored"."""
import pytest

from transformer_zoo.training.engine.cli import check_flags_apply
from transformer_zoo.training.pretrain.arguments import (
    COMMON_DEFAULTS,
    FAMILY_DEFAULTS,
    FLAG_SCOPES,
    apply_family_defaults,
    build_parser,
    family_default,
)


def _resolved(argv):
    parser = build_parser()
    args = parser.parse_args([str(a) for a in argv])
    check_flags_apply(parser, args, FLAG_SCOPES)
    apply_family_defaults(args)
    return args


def test_the_decoder_takes_its_measured_defaults():
    args = _resolved([])
    assert args.family == "decoder"
    assert args.model_overrides == "hidden_size=128,num_hidden_layers=4,num_attention_heads=4,intermediate_size=512"
    assert (args.vocab_size, args.learning_rate, args.dropout) == (8000, 3e-3, None)  # None: the preset's dropout


@pytest.mark.parametrize("family", ["encoder", "seq2seq"])
def test_other_families_keep_the_common_defaults(family):
    args = _resolved(["--family", family])
    assert family not in FAMILY_DEFAULTS
    assert args.model_overrides == COMMON_DEFAULTS["model_overrides"]
    assert (args.vocab_size, args.learning_rate, args.dropout) == (8000, 1e-3, None)  # None: the preset's dropout


def test_given_values_are_kept_from_the_command_line_and_from_a_config_file(tmp_path):
    args = _resolved(["--learning_rate", "5e-4", "--dropout", "0.1", "--vocab_size", "300", "--model_overrides", ""])
    assert (args.learning_rate, args.dropout, args.vocab_size, args.model_overrides) == (5e-4, 0.1, 300, "")
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 1.0e-3\nvocab_size: 8000\n")
    args = _resolved(["--config", config])
    assert (args.learning_rate, args.vocab_size) == (1e-3, 8000)
    assert args.model_overrides == family_default("decoder", "model_overrides")  # unset in the file: the family's


def test_vit_leaves_the_tokenizer_flags_alone():
    args = _resolved(["--family", "vit"])  # not refused: --vocab_size was never given
    assert args.model_overrides == COMMON_DEFAULTS["model_overrides"] and args.learning_rate == 1e-3
    with pytest.raises(ValueError, match="--vocab_size 500 would be ignored"):
        _resolved(["--family", "vit", "--vocab_size", "500"])


def test_the_help_names_each_familys_default():
    parser = build_parser()
    helps = {action.dest: action.help for action in parser._actions}
    assert "default: decoder 0.003; other families 0.001" in helps["learning_rate"]
    assert "default: decoder 'hidden_size=128," in helps["model_overrides"]
    # The formatter does not add a second, misleading "(default: None)" to a help that names its default.
    formatter = parser._get_formatter()
    learning_rate = next(action for action in parser._actions if action.dest == "learning_rate")
    assert formatter._get_help_string(learning_rate) == helps["learning_rate"]
    seed = next(action for action in parser._actions if action.dest == "seed")
    assert formatter._get_help_string(seed).endswith("(default: %(default)s)")
