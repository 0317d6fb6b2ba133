"""Is speculation lossless here: the sampling check, two-sample tests, greedy numerics."""
