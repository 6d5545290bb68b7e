// kernels/cpu/avx512_vnni.cpp — the AVX-512 kernel table for CPUs that also have VNNI
// (-mavx512vnni): the q8 int8 dot becomes one vpdpbusd instead of vpmaddubsw + vpmaddwd.
// Integer block sums are exact either way, so results are bitwise those of avx512.cpp.
#define COLIBRI_AVX512_NAMESPACE avx512_vnni
#define COLIBRI_AVX512_TABLE_GETTER avx512_vnni_table
#define COLIBRI_Q8_VNNI 1
#include "kernels/cpu/avx512_body.inl"
