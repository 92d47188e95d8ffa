#!/bin/bash
# Two things are missing: the execute bit, and a shebang line naming the interpreter.
set -e
sed -i '1i #!/usr/bin/env python3' tools/greet
chmod +x tools/greet
./tools/greet Ada Linus
