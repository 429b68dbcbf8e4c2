"""Seaway core: everything a single cluster needs."""
