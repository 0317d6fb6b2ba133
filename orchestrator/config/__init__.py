"""Configuration: named profiles (TOML, validated, SPECCTL_* overrides), machine-wide settings, the
standard per-user dirs. Imports: errors, files, the contract, adapters.base/registry (each
backend's own profile section)."""
