#!/bin/bash
# Word splitting of $(ls ...) and of unquoted "$src/$f": loop over a glob and quote every expansion.
set -e
cat > backup.sh <<'SH'
#!/bin/bash
# Back up every regular file directly inside a folder (default: docs) into backup/ as NAME.bak,
# then print how many files were backed up.
src=${1:-docs}
mkdir -p backup
count=0
for path in "$src"/*; do
    [ -f "$path" ] || continue
    f=$(basename "$path")
    cp "$path" "backup/$f.bak"
    count=$((count + 1))
done
echo "backed up $count files"
SH
bash backup.sh
ls backup
