"""`specctl bench`: the flow, a row's figures, the verdict, `--backends`, `--also routed`."""
