"""Training between rounds: rows from stored token ids, group advantages, GRPO + LoRA (see round_step.py)."""
