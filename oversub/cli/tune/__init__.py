"""`oversub tune`: the command, the run of its trials, each trial as `check` runs it, the report."""
