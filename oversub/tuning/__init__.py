"""`oversub tune`: the candidate settings, the interleaved trials, their statistics
and ranking, and how they are shown."""
