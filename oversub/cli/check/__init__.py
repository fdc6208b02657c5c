"""`oversub check`: the command, its runners, reports, progress lines and metric capture."""
