"""Replay of the DPBench study with ektelo-ng plans: data, workloads, metric, runner and report."""
