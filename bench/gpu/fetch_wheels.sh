#!/usr/bin/env bash
# Fills .whl/ (repo root, git-ignored) with what run.sh installs on the device machine: the py3.12
# manylinux x86_64 wheels pinned in wheels.txt (lintloop's dependencies the device image lacks) and a
# wheel of lintloop built from this checkout. Run it right before the device call: the lintloop wheel
# is rebuilt every time (the sources change), the pinned wheels are downloaded once.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=bench/gpu
py=${PYTHON:-$( [ -x .venv/bin/python3 ] && echo .venv/bin/python3 || echo python3 )}

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")" .whl
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"

mapfile -t specs < <(grep -Ev '^\s*(#|$)' "$here/wheels.txt")
# The device README's command, verbatim but for the list of NAME==VERSION.
"$py" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${specs[@]}"

# One version of each package: two stop the whole install on the device. Drop any wheel not pinned
# (an earlier pin, an old lintloop build).
declare -A wanted=()
for spec in "${specs[@]}"; do
  name=${spec%%==*}; wanted["${name//-/_}-${spec#*==}"]=1
done
for wheel in .whl/*.whl; do
  base=$(basename "$wheel"); key=$(cut -d- -f1-2 <<<"$base")
  [[ -n ${wanted[${key,,}]:-} ]] || rm -v "$wheel"
done
rm -f .whl/lintloop.fingerprint

# lintloop from a copy of the files that travel (tracked and untracked-not-ignored; not those deleted
# but still in the index), so the build leaves nothing in the checkout and packs nothing that stays behind.
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
while IFS= read -r -d '' f; do if [[ -e $f ]]; then printf '%s\0' "$f"; fi; done \
  < <(git ls-files -z --cached --others --exclude-standard) | xargs -0 cp --parents -t "$src"
"$py" -m pip wheel -q --no-deps --no-build-isolation -w .whl "$src"
bash "$here/fingerprint.sh" "$src" >.whl/lintloop.fingerprint  # of the copy: exactly what was built

ls -l .whl
total=$(du -cb .whl | tail -1 | cut -f1 | numfmt --to=iec-i)
echo "wheels: $(ls .whl/*.whl | wc -l), total ${total}B (a call carries at most 64 MiB)"
