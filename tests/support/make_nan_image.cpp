// tests/support/make_nan_image.cpp — writes the tiny synthetic model (synthetic_model.h) with
// the named tensors all NaN: the images the C API and CLI tests of the non-finite guard run.
// Usage: make_nan_image OUT TENSOR...
#include <cstdio>

#include "support/synthetic_model.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT TENSOR...\n", argv[0]);
    return 2;
  }
  colibri::testing::ModelImageParts parts = colibri::testing::model_parts(colibri::testing::tiny_model_config());
  for (int i = 2; i < argc; ++i) parts.nan_tensors.emplace_back(argv[i]);
  if (colibri::Error e = colibri::testing::write_model_parts(argv[1], parts)) {
    std::fprintf(stderr, "%s: %s\n", argv[1], e.message.c_str());
    return 1;
  }
  return 0;
}
