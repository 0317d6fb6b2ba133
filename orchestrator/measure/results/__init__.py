"""The saved records (tuned results, the fastest backend, certificates, bench reports)."""
