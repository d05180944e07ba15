#!/bin/bash
set -e
echo "Hello, Harbor!" > /app/hello.txt
