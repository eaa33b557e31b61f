// The torch headers a kernel module compiles against, first of every torch-facing kernel's sources
// (build.py passes load_inline no_implicit_headers, so nothing else is prepended). Why not
// <torch/extension.h>, which load_inline would add: it pulls in torch's whole C++ frontend
// (autograd, nn, optim, serialization) that no kernel uses, and each kernel build paid for it.
// Compiling an empty file with it took 62 s at -O3 on an AVX2-only Zen 3 (another job running);
// with these, 25 s (3 December 2026). What the kernels use: ATen's tensors and ops, at::parallel_for,
// and pybind11 with torch's type casters and error translation (torch::wrap_pybind_function).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>
