"""Sources that read a vLLM server, NVML, dcgm-exporter, a recording or Prometheus."""
