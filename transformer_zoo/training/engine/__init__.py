"""The training loop and what it stands on: its configuration, checkpoints and exact resumption, devices and
processes, optimisers and schedules, evaluation, the output folder, and the command-line plumbing the recipes share.
"""
