"""One round of `alight run`: every task x attempt as one episode, through a real harness.

What the room holds: deterministic episode ids and resume decisions (plan.py), a per-task cache of git
sources and the workspace pipeline that runs ahead of the harnesses (sources.py, workspaces.py), one episode
from registration to reward (episode.py), the scheduler (scheduler.py), cleanup after a killed run
(stale.py), the progress display (progress.py) and the summary (summary.py).

It may import the harness runner, tasks, reward, store and errors; it is handed the proxy and never starts
servers itself (commands/run.py does, through the shared lifecycle).
"""
