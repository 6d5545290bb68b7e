// kernels/cpu/dispatch.cpp — run-time choice of the kernel table (CPU feature probes).
// Compiled without ISA flags. The argument checks and the ISA-independent helpers of kernels.h
// are in common.cpp (library colibri_kernels_scalar, which tools link without the SIMD tables).

#if defined(COLIBRI_KERNELS_X86)
#include <cpuid.h>
#endif

#include "kernels/cpu/internal.h"

namespace colibri::kernels {
namespace detail {

namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512 = false;
  bool avx512_vnni = false;
};

#if defined(COLIBRI_KERNELS_X86)
// CPUID.1:ECX bit 29. (Clang 14's __builtin_cpu_supports does not know "f16c".)
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
#endif

// __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XGETBV).
CpuFeatures probe_cpu() {
  CpuFeatures f;
#if defined(COLIBRI_KERNELS_X86)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

const CpuFeatures &cpu() {
  static const CpuFeatures features = probe_cpu();
  return features;
}

}  // namespace

bool cpu_supports_avx2() { return cpu().avx2; }
bool cpu_supports_avx512() { return cpu().avx512; }
bool cpu_supports_avx512_vnni() { return cpu().avx512_vnni; }

}  // namespace detail

Isa best_isa() {
  if (detail::cpu_supports_avx512()) return Isa::Avx512;
  if (detail::cpu_supports_avx2()) return Isa::Avx2;
  return Isa::Scalar;
}

const KernelTable &kernel_table(Isa isa) {
#if defined(COLIBRI_KERNELS_X86)
  if (isa == Isa::Avx512 && detail::cpu_supports_avx512()) {
    return detail::cpu_supports_avx512_vnni() ? detail::avx512_vnni_table() : detail::avx512_table();
  }
  if (isa >= Isa::Avx2 && detail::cpu_supports_avx2()) return detail::avx2_table();
#else
  (void)isa;
#endif
  return detail::scalar_table();
}

const KernelTable &default_kernel_table() { return kernel_table(best_isa()); }

}  // namespace colibri::kernels
