// kernels/cpu/dispatch.cpp — run-time choice of the kernel table. Compiled without ISA flags.
// The CPU feature probes (best_isa among them), the argument checks and the ISA-independent
// helpers of kernels.h are in common.cpp (library colibri_kernels_scalar, which tools link
// without the SIMD tables).

#include "kernels/cpu/internal.h"

namespace colibri::kernels {

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
