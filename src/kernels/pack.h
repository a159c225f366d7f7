// Packing a row-major weight into panels of kPanelRows rows (kernels/weight_matrix.h), in its
// stored format: dense values, fp8 codes (scales copied as they are), or int4 nibbles (scales
// regrouped per panel).
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "core/huge_page_buffer.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace mlaserve {

// Bytes the packed copy of `src` takes, scales included (the last panel is padded with zeros).
size_t PackedBytes(const WeightMatrix& src);

// `bytes` rounded up to the packed layouts' alignment (64: PackedBytes is always a multiple).
size_t PackAlignUp(size_t bytes);

// Writes `src` (row-major) into dst[PackedBytes(src)], which must be zero-filled and 64-byte
// aligned, and returns the packed view of dst. Panel p, column c, lane i holds row p*16+i,
// column c.
WeightMatrix PackPanels(const WeightMatrix& src, std::byte* dst, ThreadPool& pool);

// Packs an fp32 matrix computed at run time (attention's keys and values), element (r, c) =
// src[r * row_stride + c * col_stride] for r < rows, c < cols, into panels ([ceil(rows / 16)][cols]
// [16]) of dtype F32, or BF16 rounded to nearest even; padding lanes are zero. dst holds
// PackedF32PanelsBytes(rows, cols, dtype) bytes, 64-byte aligned; returns the packed view of it.
size_t PackedF32PanelsBytes(int64_t rows, int64_t cols, DType dtype);
WeightMatrix PackF32Panels(const float* src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                           DType dtype, void* dst);

// W^T of a row-major matrix [rows, cols] in panels ([cols, rows] packed): a dense matrix keeps
// its dtype and values; a grouped matrix of int8 codes or of uint4 / uint8 codes with mins keeps
// its codes and leaves its scales (and mins) behind: the copy's groups are whole rows of unit
// scale (and zero min), and the caller multiplies its activations by the source's scales instead
// (x[r] * scale(r, g) for the copy's rows in column group g of the source; with mins it also
// subtracts sum_r x_unscaled[r] * min(r, g) from them); fp8 blocks are transposed with their
// scale grid (a slice from a band's first row). Only the formats CanPackTransposed
// names; `TransposedShape` is the copy's view before packing (for PackedBytes); dst as
// PackPanels's (its old contents never matter).
bool CanPackTransposed(const WeightMatrix& src);
WeightMatrix TransposedShape(const WeightMatrix& src);
WeightMatrix PackTransposedPanels(const WeightMatrix& src, std::byte* dst);

// Packs every matrix `matrices` points at (row-major) into one block, storage (replaced, zero
// filled, in 2 MB pages where the system grants them: a decode step streams it; owned by the
// caller), and points each at its packed copy. after_each (optional) sees each source view once it
// is packed (to release the checkpoint's pages). An error only when the memory is not there.
[[nodiscard]] Status PackAll(std::span<WeightMatrix* const> matrices, HugePageBuffer& storage, ThreadPool& pool,
                             const std::function<void(const WeightMatrix&)>& after_each = {});

}  // namespace mlaserve
