"""Graded tests (public): practice exercises and the public checks of homework problems.

A package so that tests/graded/test_chNN_*.py and tests/hidden/test_chNN_*.py can share file names.
"""
