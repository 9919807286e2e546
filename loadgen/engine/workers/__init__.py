"""Load workers: one small interface (`base.Engine`, `base.Worker`), two engines.

`processes` (loadgen.engine.workers.processes) runs workers as local processes,
`ray_actors` as Ray actors on a cluster; each worker runs a `core.WorkerCore`.
`driver` starts them, measures their clocks (`clock`), releases each at its
own deadline, gathers the reports they stream (served live through `live`)
and merges them. Merge and verdict never know which engine ran.
"""
