"""Stand-in for the one name transformers' tests/test_configuration_common.py imports from
tests/utils/test_configuration_utils.py, which transformers' source distribution does not ship.

`config_common_kwargs`: keywords every PreTrainedConfig takes, each at a value other than its default, which
ConfigTester passes to a config class and then reads back (`create_and_test_config_common_properties`). Written
here from the fields PreTrainedConfig declares (transformers/configuration_utils.py); ConfigTester compares `dtype`
with torch.float16 itself, so that value is fixed.
"""

STAND_IN = True

config_common_kwargs = {
    "output_hidden_states": True,
    "return_dict": False,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["ZooCommonTestModel"],
    "id2label": {0: "first", 1: "second"},
    "label2id": {"first": 0, "second": 1},
    "problem_type": "regression",
}
