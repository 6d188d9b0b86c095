// cooperative_groups.h for jitlab's CPU emulator: the block and its warp-level tiles (thread_block,
// tiled_partition<N>, thread_block_tile<N>'s shuffles, votes and sync, cg::reduce). Grid-wide groups
// (this_grid, grid_group) are refused before compiling: the emulator runs one block at a time per OS thread.
#pragma once
#include "jitlab_simt.h"

namespace cooperative_groups {
namespace details {
inline unsigned linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
}  // namespace details

class thread_block {
  public:
    void sync(JITLAB_WHERE) const { __syncthreads(jitlab_file, jitlab_line); }
    unsigned thread_rank() const { return details::linear_thread(); }
    unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
    unsigned num_threads() const { return size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 group_dim() const { return blockDim; }
    dim3 dim_threads() const { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block(); }
inline void sync(const thread_block& g, JITLAB_WHERE) { __syncthreads(jitlab_file, jitlab_line); }

/// N consecutive threads of a block (N a power of two up to 32): a warp or a part of one.
template <unsigned N>
class thread_block_tile {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiled_partition<N>: N is a power of two up to 32");

  public:
    unsigned thread_rank() const { return details::linear_thread() & (N - 1); }
    unsigned size() const { return N; }
    unsigned num_threads() const { return N; }
    unsigned meta_group_rank() const { return details::linear_thread() / N; }
    unsigned meta_group_size() const { return (this_thread_block().size() + N - 1) / N; }
    unsigned mask() const {
        const unsigned lane = details::linear_thread() & 31u;
        return N == 32 ? 0xffffffffu : ((1u << N) - 1u) << (lane / N * N);
    }
    void sync(JITLAB_WHERE) const { __syncwarp(mask(), jitlab_file, jitlab_line); }
    template <class T> T shfl(T v, int src, JITLAB_WHERE) const { return __shfl_sync(mask(), v, src, N, jitlab_file, jitlab_line); }
    template <class T> T shfl_down(T v, unsigned d, JITLAB_WHERE) const {
        return __shfl_down_sync(mask(), v, d, N, jitlab_file, jitlab_line);
    }
    template <class T> T shfl_up(T v, unsigned d, JITLAB_WHERE) const {
        return __shfl_up_sync(mask(), v, d, N, jitlab_file, jitlab_line);
    }
    template <class T> T shfl_xor(T v, int m, JITLAB_WHERE) const {
        return __shfl_xor_sync(mask(), v, m, N, jitlab_file, jitlab_line);
    }
    unsigned ballot(int p, JITLAB_WHERE) const {
        const unsigned shift = N == 32 ? 0 : (details::linear_thread() & 31u) / N * N;
        return __ballot_sync(mask(), p, jitlab_file, jitlab_line) >> shift;
    }
    int any(int p, JITLAB_WHERE) const { return __any_sync(mask(), p, jitlab_file, jitlab_line); }
    int all(int p, JITLAB_WHERE) const { return __all_sync(mask(), p, jitlab_file, jitlab_line); }
};
template <unsigned N, class Parent>
inline thread_block_tile<N> tiled_partition(const Parent&) { return thread_block_tile<N>(); }
template <unsigned N>
inline void sync(const thread_block_tile<N>& g, JITLAB_WHERE) { g.sync(jitlab_file, jitlab_line); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
/// Every thread of the tile gets op over the tile's values (a butterfly of shfl_xor).
template <unsigned N, class T, class Op>
inline T reduce(const thread_block_tile<N>& g, T v, Op op, JITLAB_WHERE) {
    for (unsigned m = N / 2; m > 0; m /= 2) v = op(v, g.shfl_xor(v, (int)m, jitlab_file, jitlab_line));
    return v;
}
}  // namespace cooperative_groups
