"""The workload: prompts with categories and their mix, the formats `--prompts FILE` reads,
the shipped suites."""
