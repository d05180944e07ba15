"""The command tier: one module per command group holding its orchestration (cli.py only parses and renders).

lifecycle.py  THE shared helper: store, vLLM when asked (or an upstream URL), proxy; run until done or a
              signal; drain; stop. Every command and test environment that needs them goes through it.
serve.py      `alight serve`;  proxy.py  `alight proxy`;  harness.py  `alight harness list/install/check`
smoke_env.py  store + scripted upstream + proxy for one harness episode (`alight harness check`; tests use it)
doctor.py     `alight doctor`: what this machine has and lacks for each part of alight

May import anything below it: rollout/, train/, inspect/, harness/, sandbox/, proxy/, serve/, tasks/, reward,
scripted/, store/, config, errors, process. Never cli.py, never testing/ (the tests stand on the product).
"""
