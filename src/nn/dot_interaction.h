// The arithmetic of DLRM's "dot" interaction for one sample: a register-blocked fast kernel and
// the scalar reference that it matches bit for bit (the test oracle). nn::Interaction calls these
// per sample, in parallel over the samples of a batch.
//
// Contract (every operation in fp32, multiplications and additions each rounded once, no FMA;
// the build has -ffp-contract=off). With T = [z, e_1, .., e_F] ([R, d], R = F + 1 rows):
//   forward: for i = 1..F and j = 0..i-1, one accumulator per output, products added in column
//     order:  p_ij = ((0 + T_i[0] * T_j[0]) + T_i[1] * T_j[1]) + ... + T_i[d-1] * T_j[d-1].
//     pairs lists p_ij row-major over the strict lower triangle (p_10, p_20, p_21, p_30, ...):
//     p_ij sits at index i (i - 1) / 2 + j.
//   backward, given gz (the gradient of the output's copy of z) and g (the gradient of pairs):
//     with S symmetric, S_ij = S_ji = g_ij for j < i and S_ii = 0, for every row r and column c,
//     rows of T added in order:  dT_r[c] = ((init + S_r0 * T_0[c]) + S_r1 * T_1[c]) + ... + S_rF * T_F[c],
//     init = gz[c] for r = 0 (dT_0 is dz) and +0 otherwise.
// The fast kernels compute exactly these operations (lanes run over j in forward and over c in
// backward), so every thread count and every build give the reference's bits. Two builds, chosen
// per call by kernels::active_isa() (kernels/isa.h): 16 lanes for x86-64-v4, 8 lanes (AVX2 and
// baseline builds) otherwise.
//
// Pseudocode of the fast forward: Tt = T^T zero-padded to R rounded up to the lane count L (8
// or 16) columns; for each chunk of L columns j0.. of Tt and each block of rows i (8 per block):
// acc[8] (L lanes) += T_i[c] * Tt[c, j0..j0+L) over c; store the lanes j < i. Backward: S built
// once; for each chunk of L columns c0 (16 lanes: the last chunk masked) and block of rows r (4
// per block with 8 lanes, 8 with 16): acc += S_rj * T_j[c0..c0+L) over j.
//
// Limits: the fast kernel works in a fixed stack buffer (dot_fast_path_fits); larger shapes run
// the reference (same bits, slower). Thread safety: pure functions on caller buffers.
#pragma once

#include <cstdint>

#include "amp/precision.h"

namespace leanemb::nn {

struct DotShape {
  int64_t num_features = 0;  // F >= 1
  int64_t dim = 0;           // d >= 1: of z and of every embedding vector
  // z, e, gz and g are rounded to this grid (amp::round_to_precision) as they are read; the
  // contract then holds for the rounded values (bf16 / fp16 compute). Outputs are not rounded.
  DType precision = DType::kF32;
};

// Outputs per sample: (F + 1) F / 2.
inline int64_t dot_pair_count(const DotShape& s) { return (s.num_features + 1) * s.num_features / 2; }
// Whether the fast kernels take the shape: their stack scratch (16384 floats) holds T^T (d * R8,
// R8 = R rounded up to 8) in forward and S (R * R) in backward, plus the rounded copies of the
// inputs for a 16-bit precision; otherwise they call the reference.
bool dot_fast_path_fits(const DotShape& s);

// pairs [(F+1)F/2] from z [d] and e [F * d] (embedding f at e + f * d).
void dot_forward_sample(const DotShape& s, const float* z, const float* e, float* pairs);
// dz [d] and de [F * d] (overwritten) from gz [d] and g [(F+1)F/2], given the forward's z and e.
// REQUIRES: dz and de alias no input.
void dot_backward_sample(const DotShape& s, const float* z, const float* e, const float* gz, const float* g,
                         float* dz, float* de);

// The scalar reference of the contract above (same arguments).
void dot_forward_sample_reference(const DotShape& s, const float* z, const float* e, float* pairs);
void dot_backward_sample_reference(const DotShape& s, const float* z, const float* e, const float* gz,
                                   const float* g, float* dz, float* de);

}  // namespace leanemb::nn
