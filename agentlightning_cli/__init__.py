"""alight: harness-centric agentic RL from the command line.

Rooms and the one direction imports go (tests/test_imports.py enforces it; docs/contracts.md describes it):
cli -> commands/ (+ testing/) -> rollout/ train/ inspect/ -> harness/ sandbox/ proxy/ serve/ tasks/ reward ->
store/ config errors process yaml_files masking logs.
"""

__version__ = "0.1.0"
