// cli/npy.h — writes a float32 array as a NumPy .npy file (format version 1.0, '<f4',
// C order), atomically: a temporary file in the destination's directory, fsync, rename.
// Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace colibri_cli {

// The complete header (magic, version, length, dict, padding): its size is a multiple of 64.
std::string npy_header(const std::vector<size_t> &shape);

// Writes data (product(shape) floats) to path. Throws a runtime Failure naming the path and
// the OS error; on failure the destination is untouched and no temporary file is left.
void write_npy_atomically(const std::string &path, const std::vector<size_t> &shape, const float *data);

}  // namespace colibri_cli
