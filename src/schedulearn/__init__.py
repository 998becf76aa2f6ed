"""Schedulearn: schedule deep-learning training jobs on GPU servers."""

__version__ = "0.1.0"
