"""Strategy advice: which plan to run for a workload, with predicted or measured error."""
