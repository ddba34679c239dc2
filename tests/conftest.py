"""Shared fixtures. Tests run offline on CPU; see the README for the command."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
