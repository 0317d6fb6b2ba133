"""Measuring on this machine: `bench`, `tune`, the route per request and the kept traffic.

Nine wings, each a folder; a wing imports only the wings above it in this table (and runtime and
below); tests/test_layers.py checks it, type-only imports included:

    prompts      the workload: prompts with categories, the mix (workload), the formats
                 `--prompts FILE` reads (formats), the shipped suites (suites, *.json), a
                 request body of each API read as its conversation (bodies)
    lab          where timings are taken: a short-lived server per configuration (engine),
                 servers kept up or one at a time, and the watch on the machine (servers)
    estimates    what the timings say: low quantiles and intervals (estimate), by objective and
                 with the physical bound (intervals), whole requests (whole), step costs from
                 short requests (step_costs: StepCosts)
    results      the saved records, each validated when read back: tuned results (tuned),
                 the fastest backend (winners), losslessness certificates (certificates), bench
                 reports (reports); one base, record.Record
    lossless     is speculation lossless: the sampling check (check), two-sample tests
                 (twosample), what numerics explain of greedy replies (numerics)
    route        speculation per request: a request's kind (classify), what a setting costs a
                 request (costs: RequestCosts), the route and its choice (choose), what the
                 served requests tell per kind and load (learned) and kept on disk (remembered)
    traffic      the user's own requests: the file (kept), keeping and forgetting (store), what
                 it says and replays (replay)
    tune         `specctl tune`: the flow (flow), the paired race (race), the sweep of
                 `--exhaustive` and the batch schedule (sweep: Sweep), the cost model's inputs (fit)
    bench        `specctl bench`: the flow (flow), a row's figures (figures), the verdict
                 (verdicts), `--backends` (versus), `--also routed` (routed)
"""
