"""Tests of ``dagagent.agent``."""
