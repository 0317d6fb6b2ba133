"""`specctl tune`: the flow, the paired race, the sweep, the cost model's inputs."""
