#!/bin/bash
# The traceback says: TypeError: can only concatenate str (not "int") to str.
set -e
sed -i 's/print("Total: " + total)/print("Total: " + str(total))/' total.py
python3 total.py 3 4 5
