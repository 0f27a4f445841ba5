#!/bin/sh
# Helm post-renderer: Helm pipes the chart's rendered manifests in and applies what comes out.
#   helm install vllm vllm/vllm-stack -f values.yaml --post-renderer deploy/kubernetes/production-stack/post-renderer.sh
set -eu
cd "$(dirname "$0")"
cat > helm-output.yaml
exec kubectl kustomize .
