"""The shipped profiles (TOML), installed as package data of specctl.profiles."""

if __name__ != "specctl.profiles":  # the folder imported by its bare name, from the repo root
    raise ImportError(f"import specctl.profiles, not {__name__}: pyproject.toml maps "
                      "the folder under specctl (`pip install -e .` once)")
