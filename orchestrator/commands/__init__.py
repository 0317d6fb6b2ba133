"""Each command's flow, one module per command (up, bench, tune, ...), below the CLI: a command
takes the App and what was asked, runs its steps in order and returns a typed outcome. It never
prints and never asks a terminal: progress goes through a callback the CLI gives (humanize.Say),
and so does a question for the user. Layer: may import app, runs and everything below; cli sits
on top."""
