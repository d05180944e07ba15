"""Shipped test environments and fakes, for tests, benches and demos.

proxy_env.py        THE test environment: commands/smoke_env.py's store + scripted (or real) upstream + proxy,
                    plus start_env/stop_env and raw requests; runs harness episodes too
script_agent.py     a small stdlib-only agent an external recipe runs (no install)
sandbox_agent.py    a probing agent for the sandbox tests
call_bodies.py      call records shaped like the proxy's, built without a proxy
inspect_store.py    a store filled for the inspect tests
upstream_clock.py   times the proxy's upstream requests (the harness and continuation benches)
one_call/           a one-call script agent recipe and its task set (the learning test)

The scripted upstream itself (fake_vllm and the harness scripts) is product code in scripted/: `alight harness
check` runs on it. Sits above everything: may import any room of the product; nothing of the product imports it
(tests/test_imports.py).
"""
