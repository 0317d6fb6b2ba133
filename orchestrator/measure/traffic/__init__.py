"""The user's own requests, kept where a profile opts in: the file, the store, the replay."""
