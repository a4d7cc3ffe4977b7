"""Run configs, one file per stage (big_vision style: `get_config(preset)`); shared pieces in common.py."""
