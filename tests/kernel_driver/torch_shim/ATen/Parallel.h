// See torch/extension.h in this folder: at::parallel_for and at::get_num_threads live there.
#pragma once
#include <torch/extension.h>
