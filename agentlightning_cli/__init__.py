"""alight: harness-centric agentic RL from the command line."""

__version__ = "0.1.0"
