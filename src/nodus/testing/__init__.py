"""Helpers for testing workloads under nodus, shipped for users' own tests.

``python -m nodus.testing.counter`` is a tiny deterministic stage program that follows the
directory contract; see :mod:`nodus.testing.counter`.

    counter.py    a tiny deterministic stage program that follows the directory contract
"""
