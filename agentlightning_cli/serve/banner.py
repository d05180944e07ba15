"""What `alight serve` prints: base URLs per protocol and the exact settings for each harness.

Ad-hoc episodes: any id in the URL path creates an episode on first use, and the API key it first presents
becomes its key. So each harness session gets its own id (here `mini-1`, `oh-1`, ...) and any secret. Beyond
loopback (proxy.host 0.0.0.0, a LAN address) that key must carry the run token (proxy/access.py): the examples
then read `<token>.mini-1`, and a section says why.
"""

from __future__ import annotations

TEMPLATE = """\
alight serve: vLLM {vllm} ({model}) behind the recording proxy {base}
  run:     {run_dir}   (store: alight.db, vLLM log: logs/vllm.log)
  policy:  {policy} (every model name a client sends is served by it)

{token_section}Base URLs (put any episode id after /e/; the first API key it presents becomes its key):
  OpenAI chat completions / Responses   {base}/e/<episode>/v1
  Anthropic Messages                    {base}/e/<episode>

mini-SWE-agent:
  MSWEA_CONFIGURED=true MSWEA_COST_TRACKING=ignore_errors LITELLM_LOCAL_MODEL_COST_MAP=True \\
  OPENAI_BASE_URL={base}/e/mini-1/v1 OPENAI_API_KEY={key1} \\
  mini -m openai/policy -t "your task" --yolo

OpenHands:
  LLM_MODEL=openai/policy LLM_BASE_URL={base}/e/oh-1/v1 LLM_API_KEY={key2} \\
  openhands --headless --override-with-envs -t "your task"

Claude Code (a known Claude model name keeps its requests plain; the proxy serves them with the policy):
  ANTHROPIC_BASE_URL={base}/e/cc-1 ANTHROPIC_API_KEY={key3} ANTHROPIC_MODEL=claude-sonnet-4-5 \\
  ANTHROPIC_DEFAULT_HAIKU_MODEL=claude-sonnet-4-5 CLAUDE_CODE_SUBAGENT_MODEL=claude-sonnet-4-5 \\
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CODE_ATTRIBUTION_HEADER=0 CLAUDE_CODE_DISABLE_THINKING=1 \\
  claude -p "your task"

Codex (Responses only; add to $CODEX_HOME/config.toml, then EPISODE_API_KEY={key4} codex exec "your task"):
  model = "policy"
  model_provider = "alight"
  [model_providers.alight]
  name = "alight"
  base_url = "{base}/e/codex-1/v1"
  env_key = "EPISODE_API_KEY"
  wire_api = "responses"

Every call is recorded; browse with `alight inspect {run_name}`. Ctrl-C stops vLLM and the proxy."""


TOKEN_SECTION = """\
The proxy listens beyond loopback, so only clients holding this run's token may start episodes:
  run token: {token}
  an episode's API key: the token, or <token>.<a suffix of your own> (each episode keeps the key it first sent)
  (vLLM itself has an API key too, which only alight holds; keep the token as secret as a password)

"""


def render(base: str, vllm: str, model: str, run_dir: str, run_name: str, policy: str,
           run_token: str | None = None) -> str:
    keys = {f"key{i}": f"{run_token}.{name}" if run_token else f"any-secret-{i}"
            for i, name in enumerate(("mini-1", "oh-1", "cc-1", "codex-1"), 1)}
    section = TOKEN_SECTION.format(token=run_token) if run_token else ""
    return TEMPLATE.format(base=base, vllm=vllm, model=model, run_dir=run_dir, run_name=run_name, policy=policy,
                           token_section=section, **keys)
