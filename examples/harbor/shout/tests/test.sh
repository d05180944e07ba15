#!/bin/bash
if [ "$(cat /tmp/shout.txt 2>/dev/null)" = "HARBOR TASKS RUN HERE" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
