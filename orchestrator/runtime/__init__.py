"""Running servers: processes and their groups, state files, supervision, short-lived servers for
measuring, the HTTP client, the handoff from `up` to its supervisor, provisioning. Imports:
planning and below."""
