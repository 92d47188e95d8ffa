"""Service launcher: reads config.json and prints what it would start."""

import json
import sys

REQUIRED = {"name": str, "host": str, "port": int, "workers": int, "plugins": list}


def load(path):
    with open(path) as f:
        config = json.load(f)
    for key, kind in REQUIRED.items():
        if key not in config:
            sys.exit(f"config error: missing key {key!r}")
        if not isinstance(config[key], kind) or isinstance(config[key], bool):
            sys.exit(f"config error: {key} must be {kind.__name__}, got {config[key]!r}")
    return config


def main():
    config = load("config.json")
    print(f"serving {config['name']} on {config['host']}:{config['port']} with {config['workers']} workers")
    print("plugins: " + ", ".join(config["plugins"]))
    limits = config.get("limits", {})
    for key in sorted(limits):
        print(f"limit {key} = {limits[key]}")


if __name__ == "__main__":
    main()
