#!/usr/bin/env bash
# The user docs as a product: what a new user reads first (README's reading order), pages for
# each step, a license and a changelog; every link and docs path they name leads to a file; and
# no words about how the project is made (issue numbers, work tools, hosts' private paths).
#   docs_test.sh SOURCE_DIR
set -euo pipefail
cd "$1"
fail=0
bad() {
  echo "FAIL: $*" >&2
  fail=1
}

for f in LICENSE CHANGELOG.md docs/GETTING_STARTED.md docs/DEPLOY.md docs/OPERATE.md \
  docs/TROUBLESHOOTING.md docs/measurements/README.md; do
  [ -s "$f" ] || bad "$f is missing"
done
grep -q "Apache License" LICENSE 2>/dev/null || bad "LICENSE is not the Apache License 2.0"

# README's reading order: getting started on a GPU host, then deploy, operate, the reference.
order=$( (grep -o 'docs/\(GETTING_STARTED\|DEPLOY\|OPERATE\|TROUBLESHOOTING\)\.md' README.md || true) | awk '!seen[$0]++' | tr '\n' ' ')
[ "$order" = "docs/GETTING_STARTED.md docs/DEPLOY.md docs/OPERATE.md docs/TROUBLESHOOTING.md " ] ||
  bad "README's reading order is '$order'"

# The pages a user reads: README, docs/, the deploy files, and what profctl prints.
pages=(README.md CHANGELOG.md $(find docs deploy -name '*.md' -o -name '*.yaml' -o -name '*.yml' \
  -o -name '*.service' -o -name 'Dockerfile' | sort))
user_text=("${pages[@]}" client/*.cc scripts/demo.sh scripts/package.sh deploy/systemd/install.sh)

# Development words: issue numbers, the machines and tools the project was made with.
if grep -nE '\b[Ii]ssues? #?[0-9]+|\.\./shared|/work/|nvidia-h200-x[0-9]|\bh-[a-z]+ branch' \
  "${user_text[@]}"; then
  bad "development details in user docs (above)"
fi

# Links: [text](path) relative to the page, and docs/... paths named anywhere.
for page in "${pages[@]}"; do
  case "$page" in *.md) ;; *) continue ;; esac
  dir=$(dirname "$page")
  while IFS= read -r link; do
    target=${link%%#*}
    [ -z "$target" ] && continue
    case "$target" in http*|mailto:*) continue ;; esac
    [ -e "$dir/$target" ] || bad "$page links to $link, which is not there"
  done < <(grep -oE '\]\([^)]+\)' "$page" | sed 's/^](//; s/)$//')
done
while IFS=: read -r page path; do
  [ -e "$path" ] || bad "$page names $path, which is not there"
done < <(grep -oE 'docs/[A-Za-z_/.-]+\.md' "${user_text[@]}" | sort -u)

[ "$fail" = 0 ] && echo PASS
exit "$fail"
