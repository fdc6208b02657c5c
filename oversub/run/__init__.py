"""Running: the one loop and the one clock, process trees, stress, stop signals."""
