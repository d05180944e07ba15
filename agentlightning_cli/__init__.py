"""alight: harness-centric agentic RL from the command line.

Rooms and the one direction imports go (tests/test_imports.py enforces it; docs/contracts.md describes it):
testing/ -> cli -> commands/ -> rollout/ train/ inspect/ -> harness/ sandbox/ proxy/ serve/ scripted/ tasks/ reward ->
store/ config errors process yaml_files masking logs.
Nothing of the product imports testing/ (the shipped test environments stand on the product, never the reverse).
"""

__version__ = "0.1.0"
