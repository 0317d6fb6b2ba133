"""From profile + machine + installed backends + models to one frozen, explained Plan: backend
choice, draft selection, memory plan, the cost model. Imports: config, machine, models and the
leaves."""
