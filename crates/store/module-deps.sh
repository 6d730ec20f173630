#!/bin/sh
# Module dependency listing of crates/store/src: for each top-level module (a folder as one),
# the crate modules its code names (use crate::x, crate::x::y), comments and tests excluded.
cd "${1:-crates/store/src}"
for f in *.rs */; do
  f=${f%/}
  m=${f%.rs}
  [ "$m" = lib ] && continue
  files=$f; [ -d "$f" ] && files=$(ls $f/*.rs)
  deps=$(for g in $files; do sed '/#\[cfg(test)\]/,$d' "$g"; done | grep -v '^\s*//' |
    grep -o 'crate::[a-z_]*' | sed 's/crate:://' | sort -u | grep -vx "$m" | tr '\n' ' ')
  echo "$m -> $deps"
done
