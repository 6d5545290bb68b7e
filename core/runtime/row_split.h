// core/runtime/row_split.h — how Session::matmuls cuts the rows of several matrices that
// share one input into tasks of equal weight bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace colibri::runtime {

// A place in the row space of matrices laid one after another: row `row` of matrix `matrix`.
// {count, 0} is the end of the space.
struct RowPosition {
  size_t matrix = 0;
  size_t row = 0;
};

// Where task `task` of `task_count` (0 <= task <= task_count) starts when the rows of `count`
// matrices, one after another, are cut into tasks of equal bytes; each cut is rounded to the
// nearest multiple of `align` rows inside its matrix, or to the matrix's end (a position
// {j, rows of j}, the same place as {j + 1, 0}). shape(j, &rows, &row_bytes) describes
// matrix j. Task i covers [cut(i), cut(i + 1)): together the tasks cover every row exactly
// once, in order, and a task can span the end of one matrix and the start of the next. Tasks
// can be empty (small matrices, or cuts that round to the same row).
template <class Shape>
RowPosition equal_bytes_cut(Shape &&shape, size_t count, size_t task, size_t task_count, size_t align) {
  uint64_t total = 0;
  for (size_t j = 0; j < count; ++j) {
    uint64_t rows = 0, row_bytes = 0;
    shape(j, &rows, &row_bytes);
    total += rows * row_bytes;
  }
  const uint64_t target = task_count == 0 ? total : total / task_count * task + total % task_count * task / task_count;
  uint64_t start = 0;
  for (size_t j = 0; j < count; ++j) {
    uint64_t rows = 0, row_bytes = 0;
    shape(j, &rows, &row_bytes);
    if (target < start + rows * row_bytes) {
      const uint64_t row = ((target - start) / row_bytes + align / 2) / align * align;
      return {j, static_cast<size_t>(row < rows ? row : rows)};
    }
    start += rows * row_bytes;
  }
  return {count, 0};
}

}  // namespace colibri::runtime
