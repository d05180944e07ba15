#!/bin/bash
set -e
echo "HARBOR TASKS RUN HERE" > /tmp/shout.txt
