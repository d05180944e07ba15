"""The one-call harness (an external recipe, no `install`), its reward scorer and a toy task set: learning through
`alight run --rounds N` on CPU. The task set's reward reads hidden/target_ids.json, which its user writes
({"target": [token ids], "ignore": [ids], "vocab": size}): the share of the reply's tokens in the target set."""
