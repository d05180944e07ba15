"""Harness installs and outcome judging (the runner itself is agentlightning_cli/harness.py)."""
