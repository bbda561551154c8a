"""The domain (language) adaptation recipe (`recipes/domain_adapt.py`): measure, extend the vocabulary, initialise
the new rows, continue pretraining, and check downstream whether it helped.
"""
