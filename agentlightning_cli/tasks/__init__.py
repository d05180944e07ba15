"""Task sets: JSONL loading and validation (alight's own lines and SWE-bench's), workspaces, hidden files, and
the setup/reward shell (shell.py, its process group through process.py).

May import: sandbox/ (setup and reward run sandboxed), store/, config, errors, process. Never the proxy, serve/,
the harness package or commands/.
"""

from agentlightning_cli.tasks.history import History, clean_history, install_history
from agentlightning_cli.tasks.load import TaskSetReport, check_task_file, load_tasks
from agentlightning_cli.tasks.model import Problem, SwebenchSpec, Task
from agentlightning_cli.tasks.patch import AgentPatch, agent_patch, patch_base_dir, remove_base, snapshot_base
from agentlightning_cli.tasks.workspace import prepare_workspace, reveal_hidden_files

__all__ = [
    "AgentPatch",
    "History",
    "Problem",
    "SwebenchSpec",
    "Task",
    "TaskSetReport",
    "agent_patch",
    "check_task_file",
    "clean_history",
    "install_history",
    "load_tasks",
    "patch_base_dir",
    "prepare_workspace",
    "remove_base",
    "reveal_hidden_files",
    "snapshot_base",
]
