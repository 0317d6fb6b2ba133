"""One module per command's flow (up, bench, tune): each takes what the user asked, resolves the
plan once, does the work and returns a typed outcome. None prints: progress goes through the
callback the CLI gives, and the CLI renders what comes back."""
