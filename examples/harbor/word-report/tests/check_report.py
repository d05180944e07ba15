"""Writes /logs/verifier/reward.json: `reward` (both counts right: 1, else 0) and `valid_json` (the report is a
JSON object: 1, else 0)."""
import json

expected = {"lines": 3, "words": 9}
try:
    with open("/data/report.json") as f:
        report = json.load(f)
    valid = isinstance(report, dict)
except (OSError, ValueError):
    report, valid = {}, False
right = valid and all(report.get(k) == v for k, v in expected.items())
with open("/logs/verifier/reward.json", "w") as f:
    json.dump({"reward": 1.0 if right else 0.0, "valid_json": 1.0 if valid else 0.0}, f)
