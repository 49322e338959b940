"""Tests of ``dagagent.cli``."""
