"""Just enough ELF reading to check an exported object: its undefined symbols and section sizes
(no binutils for the target needed)."""

import struct
from pathlib import Path

from ..errors import ConfigError

__all__ = ["code_size", "sections", "undefined_symbols"]

_SHT_SYMTAB, _SHF_WRITE, _SHF_ALLOC, _SHF_EXECINSTR = 2, 0x1, 0x2, 0x4


def _read(path):
    blob = Path(path).read_bytes()
    if blob[:4] != b"\x7fELF":
        raise ConfigError(f"{path} is not an ELF file")
    wide, order = blob[4] == 2, "<" if blob[5] == 1 else ">"
    header = struct.unpack_from(order + ("16sHHIQQQIHHHHHH" if wide else "16sHHIIIIIHHHHHH"), blob)
    shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
    layout = order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")
    raw = [struct.unpack_from(layout, blob, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx][4]

    def string(table_offset, offset):
        return blob[table_offset + offset : blob.index(b"\0", table_offset + offset)].decode()

    result = []
    for name, kind, flags, _, offset, size, link, _, _, entsize in raw:
        result.append(
            dict(name=string(names, name), type=kind, flags=flags, offset=offset, size=size, link=link, entsize=entsize)
        )
    return blob, order, wide, result


def sections(path):
    """[{name, type, flags, size, ...}] of an ELF file's sections."""
    return _read(path)[3]


def undefined_symbols(path):
    """Names of the symbols an object file needs from elsewhere."""
    blob, order, wide, secs = _read(path)
    names = set()
    for sec in secs:
        if sec["type"] != _SHT_SYMTAB:
            continue
        strings = secs[sec["link"]]["offset"]
        for i in range(1, sec["size"] // sec["entsize"]):
            at = sec["offset"] + i * sec["entsize"]
            if wide:
                name, _, _, shndx, _, _ = struct.unpack_from(order + "IBBHQQ", blob, at)
            else:
                name, _, _, _, _, shndx = struct.unpack_from(order + "IIIBBH", blob, at)
            if shndx == 0 and name:
                names.add(blob[strings + name : blob.index(b"\0", strings + name)].decode())
    return sorted(names)


def code_size(path):
    """``{"text": bytes of code, "rodata": bytes of read-only data, "data": writable bytes}``
    of an object file's allocated sections."""
    sizes = {"text": 0, "rodata": 0, "data": 0}
    for sec in sections(path):
        if not sec["flags"] & _SHF_ALLOC:
            continue
        kind = "text" if sec["flags"] & _SHF_EXECINSTR else "data" if sec["flags"] & _SHF_WRITE else "rodata"
        sizes[kind] += sec["size"]
    return sizes
