#!/usr/bin/env bash
# Creates the venv the real-Dynamo test tier uses: NVIDIA Dynamo's frontend and mocker worker,
# which run on a CPU with file discovery (no etcd, no NATS).
# Usage: tests/setup_dynamo_venv.sh [VENV_DIR]   (default ~/.cache/specwatch/dynamo-venv)
# ai-dynamo's full dependency set names a package only NVIDIA's own index serves, so the package
# itself goes in without dependencies and what the frontend and mocker import is named here.
# An existing, working venv is kept.
set -euo pipefail
venv_dir="${1:-${SPECWATCH_DYNAMO_VENV:-$HOME/.cache/specwatch/dynamo-venv}}"
if [ -x "$venv_dir/bin/python" ] && "$venv_dir/bin/python" -c "import dynamo.frontend, dynamo.mocker" 2>/dev/null; then
  echo "Dynamo venv ready: $venv_dir"
  exit 0
fi
python3 -m venv "$venv_dir"
"$venv_dir/bin/python" -m pip install -q --upgrade pip
"$venv_dir/bin/python" -m pip install -q "ai-dynamo-runtime==1.6.1"
"$venv_dir/bin/python" -m pip install -q --no-deps "ai-dynamo==1.6.1"
# the bounds ai-dynamo and ai-dynamo-runtime 1.6.1 declare (pip leaves them unchecked under --no-deps)
"$venv_dir/bin/python" -m pip install -q aiohttp certifi "kubernetes>=32.0.1,<33" msgspec prometheus-client \
  pyzmq redis tqdm transformers typing-extensions zstandard pyyaml packaging "pydantic>=2.10.6,<=2.13.5"
"$venv_dir/bin/python" -c "import dynamo.frontend, dynamo.mocker; print('Dynamo ready in $venv_dir')"
