#!/bin/bash
# Three problems: a // comment and two trailing commas (not JSON), and port as a string (the app wants an int).
set -e
cat > config.json <<'JSON'
{
  "name": "shop",
  "host": "0.0.0.0",
  "port": 8080,
  "workers": 4,
  "plugins": ["auth", "cache", "metrics"],
  "limits": {
    "max_body_kb": 512,
    "timeout_s": 30
  }
}
JSON
python3 app.py
