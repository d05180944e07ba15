#!/bin/bash
# pytest ships in the image (no network at verification time); reward 1 when every test passes.
cd /tests
python3 -m pytest -q -p no:cacheprovider test_stats.py
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
