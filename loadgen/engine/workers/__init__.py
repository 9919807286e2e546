"""Load workers: one small interface (`base.Engine`, `base.Worker`), two engines.

`processes` runs workers as local processes, `ray_actors` as Ray actors on a
cluster; `driver` starts them, measures their clocks, releases each at its
own deadline, gathers the windows they stream and merges them. Merge and
verdict never know which engine ran.
"""
