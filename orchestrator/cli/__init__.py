"""The command line: parse, call the core, render, map errors to exit codes. It may import
anything; command modules import what they use inside their functions, so `specctl --help` stays
fast."""
