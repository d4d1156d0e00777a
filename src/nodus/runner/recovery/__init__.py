"""Recovery decisions: which snapshot an attempt restores, and when to stop recovering.

    suspects.py     a restored snapshot the program could not continue from is passed over

Imports no other room of the runner.
"""
