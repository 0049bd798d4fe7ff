"""Helpers shared by the tests: builders, fake servers and fakes. Never import from a test module."""
