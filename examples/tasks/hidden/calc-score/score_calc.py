# Revealed only after the agent finishes. Prints a partial score as the final JSON line.
import json

import calc

checks = {
    "add": lambda: calc.add(2, 3) == 5,
    "mean": lambda: calc.mean([1, 2, 3]) == 2,
}
passed = []
for name, check in checks.items():
    try:
        if check():
            passed.append(name)
    except Exception:
        pass
print(json.dumps({"reward": len(passed) / len(checks), "passed": passed, "total": len(checks)}))
