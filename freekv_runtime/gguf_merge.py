"""One GGUF file from the parts of a split one, for loaders that read a single file (transformers'
`gguf_file=` reads one file: transformers/modeling_gguf_pytorch_utils.py load_gguf_checkpoint).

llama.cpp's gguf-split (and gguf-py's GGUFWriter with split_max_tensors / split_max_size) writes the
metadata into the first part and the tensors across all parts, each part carrying `split.no`,
`split.count` and `split.tensors.count`. `merge_gguf_parts(parts, target)` writes the first part's
metadata without the `split.*` keys and every part's tensors, byte for byte (quantised blocks are copied,
not re-quantised), in the order of the parts: what gguf-split --merge produces. The copy follows gguf-py's
own gguf_new_metadata.py (copy_with_new_metadata).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["merge_gguf_parts"]


def merge_gguf_parts(parts: list[Path], target: Path) -> None:
    """Write the single GGUF that `parts` (in order, the first one holding the metadata) make to `target`
    (written beside it first and renamed, so an interrupted merge leaves no partial file under `target`)."""
    import gguf

    readers = [gguf.GGUFReader(p) for p in parts]
    first = readers[0]
    arch = first.fields["general.architecture"].contents()
    tmp = target.with_name(f".{target.name}.part")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(tmp, arch=arch, endianess=first.endianess)
    alignment = first.fields.get(gguf.Keys.General.ALIGNMENT)
    if alignment is not None:  # tensor data aligned as in the parts (the key itself is copied below)
        writer.data_alignment = int(alignment.contents())
    try:
        for field in first.fields.values():
            if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith(("GGUF.", "split.")):
                continue  # written by GGUFWriter itself, or describing the split
            value_type = field.types[0]
            sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)
        for reader in readers:
            for tensor in reader.tensors:
                writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                                       tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for reader in readers:
            for tensor in reader.tensors:
                writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
        writer.close()
        os.replace(tmp, target)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
