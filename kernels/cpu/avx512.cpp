// kernels/cpu/avx512.cpp — the AVX-512 (F, BW, VL, DQ) kernel table. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512dq plus the AVX2 flags; the code is in
// avx512_body.inl, shared with avx512_vnni.cpp.
#define COLIBRI_AVX512_NAMESPACE avx512
#define COLIBRI_AVX512_TABLE_GETTER avx512_table
#include "kernels/cpu/avx512_body.inl"
