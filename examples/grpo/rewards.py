"""Reward functions of the grpo example, named in workload.toml as ``rewards:<function>``.

TRL calls each with the batch's prompts and completions (and the dataset's other columns) and
sums what they return; each one's mean is logged per step and kept with every snapshot.
"""

from __future__ import annotations


def digits(prompts, completions, **kwargs) -> list[float]:
    """A point for each digit in the completion: the answer is a number."""
    return [float(sum(ch.isdigit() for ch in text)) for text in completions]


def short(prompts, completions, **kwargs) -> list[float]:
    """Shorter answers are better."""
    return [-0.1 * len(text) for text in completions]
