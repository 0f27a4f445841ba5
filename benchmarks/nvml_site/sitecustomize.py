"""Puts tests/nvml_double.py in place of pynvml in a Python process started with this folder on
PYTHONPATH (benchmarks/faultproxy.py's nvml_double_env): two H100s on the double's clock (the
process's monotonic clock); GPU 1 falls off the bus (NVML: GPU is lost) once the file named by
SPECWATCH_SOAK_GPU_LOST_FILE exists. Anything else on PYTHONPATH is left as it was; without the two
variables this does nothing."""

import os
import sys
import time

_lost_file = os.environ.get("SPECWATCH_SOAK_GPU_LOST_FILE")
_tests = os.environ.get("SPECWATCH_SOAK_TESTS_DIR")
if _lost_file and _tests:
    sys.path.append(_tests)
    from nvml_double import FakeNvml, hopper_gpu  # imports the real pynvml for its errors and structs

    class _SoakNvml(FakeNvml):
        def _enter(self, function, handle=None):
            if not self.gpus[1].lost and os.path.exists(_lost_file):
                self.lose_gpu(1)
            return super()._enter(function, handle)

    sys.modules["pynvml"] = _SoakNvml([hopper_gpu(0), hopper_gpu(1)], clock=time.monotonic)
    sys.path.remove(_tests)
