"""The builders of the run configs. Each file of configs/ is one stage, a thin `get_config(arg)` over these:

  common    the sections every stage shares (`base`), the presets (`parse_preset`), the published architectures
  rl_stage  every RL stage's sections with the paper's values (`base`)
  eval      the eval stage (`base`) and its `eval` section

They live in the package, so a stage file imports them from any working directory with no sys.path change.
"""
