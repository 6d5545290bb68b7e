#!/usr/bin/env bash
# tests/cuda/no_cuda_dependency.sh LIBCOLIBRI [MODULE] — libcolibri.so.1 has no hard dependency
# on the CUDA libraries (it dlopens the CUDA module only when a session asks for a device), and
# the module, when built, links the CUDA runtime statically (it needs only the driver, which the
# CUDA runtime loads itself at run time). Exit 0 = holds, 1 = a dependency was found.
set -euo pipefail
lib=${1:?usage: no_cuda_dependency.sh LIBCOLIBRI [MODULE]}
module=${2:-}
pattern='libcuda|libcudart|libcublas|libnvrtc|libnvidia|libcolibri_cuda'
status=0
needed=$(readelf -d "$lib" | awk '/\(NEEDED\)/ {print $NF}' | tr -d '[]')
echo "$lib needs: $(tr '\n' ' ' <<<"$needed")"
if grep -Eq "$pattern" <<<"$needed"; then
  echo "FAIL: $lib has a DT_NEEDED on a CUDA library" >&2
  status=1
fi
# ldd resolves the whole tree (a dependency of a dependency would show here).
if ldd "$lib" | grep -Eq "$pattern"; then
  echo "FAIL: ldd $lib resolves a CUDA library:" >&2
  ldd "$lib" | grep -E "$pattern" >&2
  status=1
fi
if [[ -n $module ]]; then
  mneeded=$(readelf -d "$module" | awk '/\(NEEDED\)/ {print $NF}' | tr -d '[]')
  echo "$module needs: $(tr '\n' ' ' <<<"$mneeded")"
  if grep -Eq 'libcudart|libcublas|libstdc\+\+' <<<"$mneeded"; then
    echo "FAIL: $module links the CUDA runtime or libstdc++ dynamically" >&2
    status=1
  fi
  exports=$(nm -D --defined-only "$module" | awk '{print $NF}')
  if [[ $exports != colibri_device_api_get ]]; then
    echo "FAIL: $module exports more than colibri_device_api_get: $(tr '\n' ' ' <<<"$exports")" >&2
    status=1
  fi
fi
exit $status
