"""Configuration: named profiles (TOML, validated, SPECCTL_* overrides), machine-wide settings, the
standard per-user dirs. Imports: errors, files and the contract (its registry gives each
backend's own profile section)."""
