"""What a run leaves for people: the JSONL metrics file, Accelerate trackers, loss and learning-rate curves, and the
facts its model card is written from.
"""
