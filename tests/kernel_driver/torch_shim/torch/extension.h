// A stand-in for the few torch names the attention kernels' vector paths use (the element types,
// ScalarType, the thread pool), so tests/kernel_driver/attention_driver.cpp compiles those sources
// without torch: cross-compiled for aarch64 and run under qemu, where no torch build exists.
// Only the torch-free parts of the sources are included by the driver (not their torch drivers).
#pragma once
#include <cstdint>
#include <cstring>

namespace at {

enum class ScalarType { Float, BFloat16, Half, Undefined };
constexpr ScalarType kFloat = ScalarType::Float;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
constexpr ScalarType kHalf = ScalarType::Half;

struct BFloat16 {   // the bits of a bfloat16, rounded to nearest even from float
  uint16_t x;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    x = static_cast<uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
  }
  operator float() const {
    const uint32_t b = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
};

struct Half {   // float16 bits (a float32 model's fp16 KV cache); the driver builds normal values only
  uint16_t x;
  Half() = default;
  explicit Half(float f) {   // truncated to 10 mantissa bits; below float16's normal range: a signed zero
    uint32_t b;
    std::memcpy(&b, &f, 4);
    const uint32_t sign = (b >> 16) & 0x8000u, exp = (b >> 23) & 0xFF;
    x = static_cast<uint16_t>(exp < 113 ? sign : sign | ((exp - 112) << 10) | ((b >> 13) & 0x3FF));
  }
  operator float() const {
    const uint32_t sign = (x & 0x8000u) << 16, exp = (x >> 10) & 0x1F, mant = x & 0x3FF;
    const uint32_t b = exp == 0 ? sign : sign | ((exp + 112) << 23) | (mant << 13);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
};

inline int get_num_threads() { return 1; }

template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t, const F& f) {
  if (begin < end) f(begin, end);
}

}  // namespace at
