"""Scores an easy task with partial credit: each check in the JSON spec (argv[1]) is worth an equal share.

Checks (all paths relative to the workspace):
  {"file": P, "content": C}   P exists and holds C (surrounding whitespace ignored)
  {"file": P}                 P exists (a regular file)
  {"dir": P}                  P is a directory
  {"absent": P}               P does not exist
  {"executable": P}           P is executable
  {"empty": P}                P exists and is empty
  {"python": CODE}            CODE runs with python3 in the workspace and exits 0 (20 s at most)
Prints {"reward": passed / total, "passed": [...], "failed": [...]} as its last line (alight's JSON reward).
"""

import json
import os
import subprocess
import sys


def passes(check):
    if "python" in check:
        try:
            return subprocess.run([sys.executable, "-c", check["python"]], capture_output=True, timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            return False
    if "absent" in check:
        return not os.path.lexists(check["absent"])
    if "dir" in check:
        return os.path.isdir(check["dir"])
    if "executable" in check:
        return os.path.isfile(check["executable"]) and os.access(check["executable"], os.X_OK)
    path = check.get("file") or check.get("empty")
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    if "empty" in check:
        return text == ""
    return "content" not in check or text.strip() == check["content"].strip()


def main():
    checks = json.loads(sys.argv[1])
    results = [(json.dumps(c), passes(c)) for c in checks]
    passed = [name for name, ok in results if ok]
    failed = [name for name, ok in results if not ok]
    print(json.dumps({"reward": round(len(passed) / len(checks), 4), "passed": passed, "failed": failed}))


if __name__ == "__main__":
    main()
