"""Tests of ``dagagent.executors``."""
