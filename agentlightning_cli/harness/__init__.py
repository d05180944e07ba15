"""Harnesses: everything about one coding-agent harness and one episode of it.

recipe.py   the leaf: the recipe model (validated YAML data), template checks, lookup by name or path
env.py      the episode's environment: scrubbed parent env, template context, EpisodeSpec
install.py  isolated installs (venv / npm) under ALIGHT_HOME/harnesses/, interpreter discovery
outcome.py  judging how an episode ended from the harness's own report (EpisodeOutcome)
runner.py   one launch: render, start in its own process group, bound by time and budget, stop, judge

May import: sandbox/ (beside it: episodes run sandboxed), store/, config, errors, process, masking, yaml_files.
Never the proxy, serve/, commands/ or the CLI: the harness knows only the base URL and key it is handed.
Inside the room recipe.py imports nothing of the harness package; env.py only recipe.py.
"""
