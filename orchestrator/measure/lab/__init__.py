"""Where `bench` and `tune` take their timings: short-lived servers, paired or one at a time."""
