"""A scripted model that speaks vLLM's wire format, and the turns that drive each real harness through it.

fake_vllm.py (+ fake_chunks, fake_tokens)  a scripted upstream: vLLM's exact response shapes, token ids and
                                           logprobs for scripted replies (`python -m agentlightning_cli.scripted.fake_vllm`)
harness_scripts.py                         scripted model turns that drive each real harness through one tool call

Product code: `alight harness check` runs a harness against it (commands/smoke_env.py). The tests use it too,
through testing/. Sits beside proxy/ and serve/ (an upstream server); imports nothing of the package above it.
"""
