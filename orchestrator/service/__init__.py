"""Running a profile as a service: systemd units and launchd plists built as objects, installed and
removed. Imports: config and the leaves."""
