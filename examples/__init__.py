"""Worked examples the docs show and the tests run (not part of the installed package)."""
