"""Fake but valid events and a tiny offline task, for tests, benchmarks and the analytics docs:
not part of the installed package (the production packages hold no generator of fake events)."""
