"""TensorBoard event files: the protobuf classes and a synchronous TFRecord writer.

The protobuf classes come from ``tensorboardX`` when it is installed, else from the
``tensorboard`` package (``tensorboard.compat.proto``): both ship the same messages, and
neither needs TensorFlow. Records are framed as TensorFlow's TFRecord format (length, masked
CRC-32C of the length, data, masked CRC-32C of the data), which every TensorBoard reader checks.

>>> import os, tempfile
>>> protos = load_protos()  # doctest: +SKIP
>>> writer = EventFileWriter(tempfile.mkdtemp(), protos, ".x")  # doctest: +SKIP
>>> writer.close()  # doctest: +SKIP
"""

from __future__ import annotations

import os
import socket
import struct
import time
import types
from typing import Any


def load_protos() -> types.SimpleNamespace:
    """The Event/Summary/Tensor/HParams protobuf modules, from tensorboardX or tensorboard."""
    try:
        from tensorboardX.proto import (
            event_pb2,
            summary_pb2,
            tensor_pb2,
            tensor_shape_pb2,
            types_pb2,
        )
        from tensorboardX.proto import plugin_hparams_pb2 as hparams_pb2
    except ImportError:
        try:
            from tensorboard.compat.proto import (
                event_pb2,
                summary_pb2,
                tensor_pb2,
                tensor_shape_pb2,
                types_pb2,
            )
            from tensorboard.plugins.hparams import plugin_data_pb2 as hparams_pb2
        except ImportError as e:
            raise ImportError(
                "flaxen.metrics.tensorboard.SummaryWriter writes TensorBoard files with the "
                "protobuf messages of the tensorboardX (or tensorboard) package, and neither is "
                "installed. Install one with `pip install flaxen[tensorboard]` (or "
                "`pip install tensorboardX`)."
            ) from e
    return types.SimpleNamespace(
        event=event_pb2, summary=summary_pb2, tensor=tensor_pb2, shape=tensor_shape_pb2,
        types=types_pb2, hparams=hparams_pb2,
    )


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def _crc32c_python(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_function() -> Any:
    # A compiled CRC-32C when one is installed; the table version otherwise.
    try:
        import google_crc32c

        return google_crc32c.value
    except ImportError:
        pass
    try:
        import crc32c

        return crc32c.crc32c
    except ImportError:
        return _crc32c_python


_crc32c = None


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``.

    >>> hex(masked_crc32c(b"123456789"))
    '0xc78ab0e5'
    """
    global _crc32c
    if _crc32c is None:
        _crc32c = _crc32c_function()
    crc = _crc32c(data) & 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class EventFileWriter:
    """Appends events to ``{log_dir}/events.out.tfevents.{time}.{host}{suffix}``.

    Writes are buffered by the file object until :meth:`flush` (or :meth:`close`).
    """

    def __init__(self, log_dir: str, protos: types.SimpleNamespace, suffix: str) -> None:
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}{suffix}"
        self.path = os.path.join(log_dir, name)
        self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self.write(protos.event.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def write(self, event: Any) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", masked_crc32c(header)))
        self._file.write(data + struct.pack("<I", masked_crc32c(data)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
