// Where a warp-specialised kernel's SharedStorage starts in dynamic shared memory: the first
// 1024-byte boundary (TMA's 128-byte swizzle repeats every 1024 bytes, so every swizzled tile
// inside SharedStorage must sit at a multiple of 1024), so a kernel asks for 1024 bytes more
// than its SharedStorage (shared_storage_bytes). A macro, expanded in place: the kernels compile
// exactly as when the line was written out (kernel_entry.cuh says why that matters for register
// allocation).
#pragma once

#include <cute/arch/util.hpp>

#define XSTAGE_SHARED_STORAGE(Storage, smem_buf)                                     \
  (*reinterpret_cast<Storage*>((smem_buf) +                                          \
                               ((1024u - (cute::cast_smem_ptr_to_uint(smem_buf) & 1023u)) & 1023u)))

namespace xstage::kernels {

// Dynamic shared memory a kernel asks for: its SharedStorage plus the alignment slack above.
template <class Storage>
constexpr int shared_storage_bytes() {
  return static_cast<int>(sizeof(Storage)) + 1024;
}

}  // namespace xstage::kernels
