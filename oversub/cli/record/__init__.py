"""Recordings as files: `--record FILE` written as the run goes, read back for `report`."""
