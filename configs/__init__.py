"""Run configs, one file per stage (big_vision style: `get_config(arg)`), each a thin file over the builders in
`rcgrpo_jax.config_lib`. `--config=configs/<stage>.py:<preset>` loads a file by its path; this package lets tests
and the pipeline import a stage as `configs.<stage>` too."""
