#!/usr/bin/env bash
# The CUDA paths in one short run, for a session that is lent a GPU (never part of CI).
# Usage on the GPU machine, from the repository root, with attnum installed:
#   bash benchmarks/gpu_check.sh 2>&1 | tee "${OUT:-.}/gpu_check.log"
set -uo pipefail
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
# The same tests, re-run on CUDA (pytest.mark.cuda parametrizations).
python -m pytest -q -m cuda tests 2>&1 | tail -5
# golden, baseline, flash (fa2, fa1) and split-KV decode on CUDA against the CPU results, and flash vs torch's
# CUDA SDPA (benchmarks/bench_cuda.py; exit 1 when a check fails).
python benchmarks/bench_cuda.py --device cuda --seq-len 4096
echo "bench_cuda: exit $?"
# One comparison point on the GPU, the real CUDA kernels under the auditor, a small sweep.
attnum compare --device cuda --policy fa2:bf16 --seq-len 4096 --json | python -c "import json,sys; d=json.load(sys.stdin); print('compare cuda', d['ratio'])"
for target in torch-sdpa-flash torch-sdpa-efficient torch-sdpa-cudnn flash-attn flashinfer xformers; do
  attnum audit "$target" --device cuda --dtype bf16,fp16 > /tmp/audit_$target.txt 2>&1
  echo "audit $target: exit $? ($(tail -1 /tmp/audit_$target.txt))"
done
attnum reproduce --profile smoke --device cuda --out /tmp/gpu_smoke --quiet 2>&1 | tail -3
