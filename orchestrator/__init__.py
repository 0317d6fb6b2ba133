"""The core of specctl: hardware, profiles, models, planning, supervision, bench and tuning."""
