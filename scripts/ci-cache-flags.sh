#!/bin/sh
# The remote stage cache's flags for a CI job (docs/remote-cache.md), for
# `make image` / `make stage` CACHE_FLAGS. $STAGE_CACHE (or $1) is the registry
# repository.
# Fetch whenever the job has a key to trust (PEERBOOT_ARTIFACT_PUB, or the
# signing key, whose own key is trusted); push only with the signing key
# (PEERBOOT_ARTIFACT_KEY: a pull request from a fork has none, and only fetches).
set -eu
repo=oci://$(printf '%s' "${1:-$STAGE_CACHE}" | tr '[:upper:]' '[:lower:]')
flags=""
if [ -n "${PEERBOOT_ARTIFACT_PUB:-}" ]; then
	flags="--cache-key env:PEERBOOT_ARTIFACT_PUB"
fi
if [ -n "${PEERBOOT_ARTIFACT_KEY:-}" ]; then
	flags="$flags --cache-to $repo --artifact-key env:PEERBOOT_ARTIFACT_KEY"
fi
if [ -n "$flags" ]; then
	flags="--cache-from $repo $flags"
fi
printf '%s\n' "$flags"
