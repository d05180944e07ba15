"""Training between rounds: rows from stored token ids, group advantages, GRPO + LoRA (see round_step.py).

May import: store/, config, errors, serve/ (model paths only), torch/trl/peft inside functions. Never the
proxy, the harness, commands/ or the CLI: the trainer sees stored calls, nothing live.
"""
