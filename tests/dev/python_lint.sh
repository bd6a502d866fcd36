#!/usr/bin/env bash
# Every Python file of the repository under pyflakes: unused imports and variables, undefined names,
# placeholder-less f-strings. The script tests and tools are run only where their label runs (some
# only on a GPU machine), so a name error there would otherwise wait for that machine to show.
#   python_lint.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: python_lint.sh SOURCE_DIR}
if command -v pyflakes3 > /dev/null; then lint=(pyflakes3)
elif command -v pyflakes > /dev/null; then lint=(pyflakes)
elif python3 -m pyflakes --version > /dev/null 2>&1; then lint=(python3 -m pyflakes)
else
  echo "FAIL: no pyflakes (install python3-pyflakes: scripts/setup.sh --test)"
  exit 1
fi
cd "$src" || exit 1
if [ -d .git ] || git rev-parse --git-dir > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.py')
else
  mapfile -t files < <(find . -name '*.py' -not -path './build*' -not -path './tests/fixtures/*' | sort)
fi
[ ${#files[@]} -gt 0 ] || { echo "FAIL: no Python files found under $src"; exit 1; }
"${lint[@]}" "${files[@]}"
rc=$?
echo "pyflakes (${lint[*]}) over ${#files[@]} files: $([ $rc -eq 0 ] && echo clean || echo "findings above")"
exit $rc
