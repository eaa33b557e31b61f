"""A fast GGUF reader: header, metadata and tensor views over a memory map.

gguf's own GGUFReader builds numpy views for every array element in the metadata, which takes
~10 s for a 49k-token vocabulary; this parser reads the same header with struct in well under
a second. Dequantization stays with `gguf.quants`.

Tensors are views into the map, read as they are used; `release` gives a tensor's pages back once
it is read (they stay in the page cache, not in the process), so loading a file one tensor at a
time never holds the whole file resident beside the model built from it.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from sgrun.errors import ModelLoadError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_NP = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
       7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
_STRING, _ARRAY = 8, 9


@dataclass
class GGUFTensor:
    name: str
    shape: tuple[int, ...]        # numpy order (outermost first), i.e. GGUF dims reversed
    qtype: GGMLQuantizationType
    data: np.ndarray              # raw bytes (uint8) or typed elements, as gguf.quants expects


class GGUFFile:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self._buf = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read {path}: {exc}") from exc
        self._mv = memoryview(self._buf)
        self._pos = 0
        try:
            self._parse()
        except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
            raise ModelLoadError(f"{path} is not a valid GGUF file: {exc}") from exc

    def release(self, data: np.ndarray) -> None:
        """Drop the resident pages under `data` (a view into this file) from the process: a
        private read-only mapping refaults them from the file if they are read again."""
        raw = getattr(self._buf, "_mmap", None)
        if raw is None or not hasattr(raw, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
            return
        base = self._buf.__array_interface__["data"][0]
        start = data.__array_interface__["data"][0] - base
        end = start + data.nbytes
        page = mmap.PAGESIZE
        start, end = start // page * page, min(-(-end // page) * page, len(raw))
        if 0 <= start < end:
            raw.madvise(mmap.MADV_DONTNEED, start, end - start)

    # --- primitive readers ----------------------------------------------------------------
    def _unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self._mv, self._pos)[0]
        self._pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        n = self._unpack("<Q")
        s = bytes(self._mv[self._pos:self._pos + n]).decode("utf-8", errors="replace")
        self._pos += n
        return s

    def _value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self._string()
        if vtype == _ARRAY:
            etype, count = self._unpack("<I"), self._unpack("<Q")
            if etype in _NP:
                arr = np.frombuffer(self._mv, dtype=_NP[etype], count=count, offset=self._pos)
                self._pos += arr.nbytes
                return arr.tolist()
            return [self._value(etype) for _ in range(count)]
        if vtype not in _SCALARS:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self._unpack(_SCALARS[vtype])

    # --- layout ---------------------------------------------------------------------------
    def _parse(self) -> None:
        if bytes(self._mv[:4]) != b"GGUF":
            raise ValueError("bad magic")
        self._pos = 4
        version = self._unpack("<I")
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        n_tensors, n_kv = self._unpack("<Q"), self._unpack("<Q")
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string()
            self.metadata[key] = self._value(self._unpack("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._unpack("<Q") for _ in range(self._unpack("<I"))]
            qtype, offset = self._unpack("<I"), self._unpack("<Q")
            infos.append((name, dims, qtype, offset))
        align = int(self.metadata.get("general.alignment", 32))
        start = -(-self._pos // align) * align
        self.tensors: list[GGUFTensor] = []
        for name, dims, qtype, offset in infos:
            qt = GGMLQuantizationType(qtype)
            block, type_size = GGML_QUANT_SIZES[qt]
            n_elems = int(np.prod(dims))
            n_bytes = n_elems * type_size // block
            raw = self._buf[start + offset:start + offset + n_bytes]
            shape = tuple(reversed(dims))
            if qt in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
                data = raw.view(np.float32 if qt == GGMLQuantizationType.F32 else np.float16).reshape(shape)
            else:
                # Quantized (and BF16) rows as bytes: [..., row_bytes], the layout gguf.quants reads.
                data = raw.reshape(*shape[:-1], shape[-1] * type_size // block)
            self.tensors.append(GGUFTensor(name, shape, qt, data))
