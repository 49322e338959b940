"""Bundled tools that run offline: used by the examples, the tests and the benchmarks."""
