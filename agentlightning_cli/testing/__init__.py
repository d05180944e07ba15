"""Shipped fakes and test environments, for tests, benches, demos and `alight harness check`.

fake_vllm.py (+ fake_chunks, fake_tokens)  a scripted upstream that speaks vLLM's wire format
harness_scripts.py                         scripted model turns that drive each real harness
script_agent.py                            a small stdlib-only agent an external recipe runs (no install)
sandbox_agent.py                           a probing agent for the sandbox tests
call_bodies.py                             call records shaped like the proxy's, built without a proxy
proxy_env.py                               THE test environment: store + scripted (or real) upstream + proxy,
                                           started through commands/lifecycle.py; runs harness episodes too

Sits at the command tier: may import commands/lifecycle.py and anything below it; never cli.py.
"""
