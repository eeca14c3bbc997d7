#!/bin/sh
# setup_venv.sh: creates the integration-test venv (pytest + telethon) unless it is up to date.
# Usage: setup_venv.sh PYTHON VENV_DIR REQUIREMENTS
set -eu
python=$1 venv=$2 reqs=$3
stamp=$venv/.requirements
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$reqs" "$stamp" &&
   "$venv/bin/python" -c 'import pytest, telethon' 2>/dev/null; then
    echo "venv up to date: $venv"
    exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
cp "$reqs" "$stamp"
"$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(pytest|telethon) '
