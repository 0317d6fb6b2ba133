"""Measuring on this machine: bench (speedup vs. the baseline), tune (choose k, p-min, n-gram or
off), the shared measuring engine, statistics, saved results. Imports: runtime and below."""
