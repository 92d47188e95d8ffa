# The script starts without any execute bit (a plain file copy may not keep modes).
chmod 644 tools/greet
