"""TensorBoard summaries: ``SummaryWriter`` with the API of ``flax.metrics.tensorboard``.

Flax writes through TensorFlow's ``tf.summary``; flaxen writes the same event files (the
tensor summaries of TensorBoard's scalars, images, audio, histograms and text plugins, readable
by TensorBoard and by ``tensorboard.util.tensor_util``) with the protobuf messages of the light
``tensorboardX`` package, or of ``tensorboard`` itself (protobuf + numpy, no TensorFlow),
imported when a writer is created: ``pip install flaxen[tensorboard]``. Images are encoded as
PNG and audio as 16-bit WAV here, with the standard library, so neither Pillow nor soundfile
is needed.

>>> import tempfile
>>> writer = SummaryWriter(tempfile.mkdtemp())  # doctest: +SKIP
>>> writer.scalar('loss', 0.25, step=1)  # doctest: +SKIP
"""

from __future__ import annotations

import io
import itertools
import os
import struct
import threading
import time
import wave
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from flaxen.metrics import _event_file

__all__ = ["SummaryWriter"]

_WRITER_IDS = itertools.count()
_HPARAM_TYPES = (bool, int, float, str, np.bool_, np.integer, np.floating, np.character)


def _flatten_dict(tree: Mapping, parent_key: str = "", sep: str = ".") -> dict[str, Any]:
    """Nested dicts to ``{'a.b': value}``; values TensorBoard cannot show become strings.

    Bools, ints, floats, strings and their numpy scalars are kept as they are.

    >>> _flatten_dict({'lr': 0.1, 'model': {'depth': 3, 'sizes': (1, 2)}})
    {'lr': 0.1, 'model.depth': 3, 'model.sizes': '(1, 2)'}
    """
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{parent_key}{sep}{key}" if parent_key else str(key)
        if isinstance(value, Mapping):
            flat.update(_flatten_dict(value, name, sep))
        elif isinstance(value, _HPARAM_TYPES):
            flat[name] = value
        else:
            flat[name] = str(value)
    return flat


def _flatten_hparams(tree: Mapping) -> dict[str, Any]:
    # tensorboardX's hparams summary takes Python scalars, not numpy ones.
    return {
        k: v.item() if isinstance(v, np.generic) else v for k, v in _flatten_dict(tree).items()
    }


def _png(image: np.ndarray) -> bytes:
    """PNG bytes of a uint8 ``[H, W, C]`` image (C = 1, 3 or 4)."""
    height, width, channels = image.shape
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    rows = np.concatenate(
        [np.zeros((height, 1), np.uint8), image.reshape(height, width * channels)], axis=1
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


def _wav(samples: np.ndarray, sample_rate: int) -> bytes:
    """16-bit PCM WAV bytes of ``[frames, channels]`` samples in [-1, 1]."""
    pcm = np.round(samples * 32767).astype("<i2")
    with io.BytesIO() as buf:
        with wave.open(buf, "wb") as out:
            out.setnchannels(samples.shape[1])
            out.setsampwidth(2)
            out.setframerate(int(sample_rate))
            out.writeframes(pcm.tobytes())
        return buf.getvalue()


def _as_images(image: Any) -> np.ndarray:
    """``[K, H, W, C]`` from the shapes Flax accepts ([H,W], [H,W,1|3], [K,H,W], [K,H,W,1|3])."""
    arr = np.asarray(image)
    if arr.ndim == 2:
        arr = arr[None, :, :, None]
    elif arr.ndim == 3:
        # [H, W, 1|3] is one image; anything else is a batch of greyscale [K, H, W] images.
        arr = arr[None] if arr.shape[-1] in (1, 3) else arr[..., None]
    elif arr.ndim != 4:
        raise ValueError(
            f"SummaryWriter.image got an array of shape {arr.shape}; pass [H, W], [H, W, C], "
            "[K, H, W] or [K, H, W, C] with C = 1 (greyscale), 3 (RGB) or 4 (RGBA)."
        )
    if arr.shape[-1] not in (1, 3, 4):
        raise ValueError(
            f"SummaryWriter.image got {arr.shape[-1]} channels (shape {arr.shape}); the last "
            "axis must have 1 (greyscale), 3 (RGB) or 4 (RGBA) channels."
        )
    if arr.dtype == np.uint8:
        return arr
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
            or arr.dtype == np.bool_):
        raise TypeError(f"SummaryWriter.image needs uint8 or float pixels, got {arr.dtype}.")
    # Float pixels are in [0, 1]. TensorFlow's convert_image_dtype (which Flax's writer uses)
    # maps x to floor(x * 255.5), saturating: do the same, so the stored pixels are equal.
    scaled = np.floor(np.clip(arr.astype(np.float64), 0.0, 1.0) * 255.5)
    return np.minimum(scaled, 255).astype(np.uint8)


class SummaryWriter:
    """Writes TensorBoard summaries (scalars, images, audio, histograms, text, hparams).

    ``log_dir`` is created when missing. With ``auto_flush`` (the default) every call is on
    disk when it returns; otherwise call :meth:`flush`. Close the writer when done; a closed
    writer refuses further writes.
    """

    def __init__(self, log_dir: str | os.PathLike, auto_flush: bool = True) -> None:
        self._protos = protos = _event_file.load_protos()
        self._event_pb, self._pb = protos.event, protos.summary
        self._tensor_pb, self._shape_pb, self._types_pb = protos.tensor, protos.shape, protos.types
        log_dir = os.fspath(log_dir)
        if os.path.exists(log_dir) and not os.path.isdir(log_dir):
            raise NotADirectoryError(
                f'SummaryWriter log_dir "{log_dir}" is an existing file, not a directory. Pass '
                "a directory path (it is created when missing)."
            )
        try:
            os.makedirs(log_dir, exist_ok=True)
        except OSError as e:
            raise OSError(
                e.errno, f'Cannot create SummaryWriter log_dir "{log_dir}": {e.strerror}. Pass '
                "a directory you can write to.", log_dir,
            ) from e
        self.log_dir = log_dir
        self._auto_flush = auto_flush
        # A synchronous writer: each call is on disk (auto_flush) or in the file buffer when it
        # returns. The suffix keeps two writers started in the same second from sharing (and
        # truncating) one file.
        suffix = f".{os.getpid()}.{next(_WRITER_IDS)}"
        self._writer = _event_file.EventFileWriter(log_dir, protos, suffix)
        self._lock = threading.Lock()
        self._closed = False

    # -- plumbing ------------------------------------------------------------------------------

    def _add(self, summary: Any, step: Any) -> None:
        if self._closed:
            raise RuntimeError(
                f'This SummaryWriter (log_dir "{self.log_dir}") is closed; create a new one.'
            )
        event = self._event_pb.Event(summary=summary, step=self._step(step), wall_time=time.time())
        with self._lock:
            self._writer.write(event)
            if self._auto_flush:
                self._writer.flush()

    @staticmethod
    def _step(step: Any) -> int:
        try:
            value = np.asarray(step)
            if value.shape != () or not np.issubdtype(value.dtype, np.integer):
                raise TypeError
            return int(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"step must be an integer (the training step), got {step!r}."
            ) from None

    @staticmethod
    def _tag(tag: Any) -> str:
        if not isinstance(tag, str) or not tag:
            raise TypeError(f"tag must be a non-empty string, got {tag!r}.")
        return tag

    def _value(self, tag: str, **fields: Any) -> Any:
        return self._pb.Summary(value=[self._pb.Summary.Value(tag=self._tag(tag), **fields)])

    # -- public API ----------------------------------------------------------------------------

    def close(self) -> None:
        """Flushes and closes the event file; calling it again does nothing."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._writer.close()

    def flush(self) -> None:
        """Writes pending summaries to disk.

        Raises ``AttributeError`` once the writer is closed (as Flax's writer does).
        """
        with self._lock:
            if self._closed:
                raise AttributeError(
                    f'This SummaryWriter (log_dir "{self.log_dir}") is closed and has nothing '
                    "to flush; create a new one to write more."
                )
            self._writer.flush()

    def scalar(self, tag: str, value: Any, step: int) -> None:
        """Saves one number (a Python or numpy scalar, or a one-element array) as float32."""
        arr = np.asarray(value)
        if arr.size != 1 or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise ValueError(
                f"SummaryWriter.scalar({tag!r}) needs one number, got {value!r} (shape "
                f"{arr.shape}, dtype {arr.dtype}). Log arrays with histogram() or write()."
            )
        self._add_tensor(tag, arr.reshape(()).astype(np.float32), step, "scalars")

    def image(self, tag: str, image: Any, step: int, max_outputs: int = 3) -> None:
        """Saves up to ``max_outputs`` images: [H,W], [H,W,C], [K,H,W] or [K,H,W,C].

        Pixels are uint8 in [0, 255] or floats in [0, 1]; greyscale images are stored as RGB.
        The summary's tensor holds ``[width, height, png_1, ..., png_k]`` as strings, the
        layout of TensorBoard's images plugin.
        """
        images = _as_images(image)[: max(int(max_outputs), 0)]
        if images.shape[-1] == 1:
            images = np.repeat(images, 3, axis=-1)  # greyscale shown as RGB, as Flax does
        height, width = images.shape[1:3]
        blobs = [str(width).encode(), str(height).encode(), *(_png(img) for img in images)]
        self._add_tensor(tag, _strings(blobs), step, "images")

    def audio(
        self, tag: str, audiodata: Any, step: int, sample_rate: int = 44100,
        max_outputs: int = 3,
    ) -> None:
        """Saves up to ``max_outputs`` clips of ``[clips, frames, channels]`` audio as WAV.

        Samples are clipped to [-1, 1]. A ``[frames]`` or ``[clips, frames]`` array is taken as
        single-channel audio. The summary's tensor holds one WAV file per clip.
        """
        arr = np.asarray(audiodata, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[None, :, None]
        elif arr.ndim == 2:
            arr = arr[:, :, None]
        elif arr.ndim != 3:
            raise ValueError(
                f"SummaryWriter.audio got shape {arr.shape}; pass [clips, frames, channels]."
            )
        if int(sample_rate) <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate!r}.")
        arr = np.clip(np.nan_to_num(arr), -1.0, 1.0)[: max(int(max_outputs), 0)]
        blobs = [_wav(clip, sample_rate) for clip in arr]
        # AudioPluginData(encoding=WAV): field 2, varint 11.
        self._add_tensor(tag, _strings(blobs), step, "audio", content=b"\x10\x0b")

    def histogram(self, tag: str, values: Any, step: int, bins: int | None = None) -> None:
        """Saves a histogram of ``values`` (flattened) with ``bins`` buckets (default 30).

        The buckets split ``[min, max]`` evenly; the summary's tensor has one row
        ``(left edge, right edge, count)`` per bucket, the layout of TensorBoard's
        histograms plugin.
        """
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        if arr.size == 0:
            raise ValueError(f"SummaryWriter.histogram({tag!r}) got no values.")
        if not np.all(np.isfinite(arr)):
            raise ValueError(
                f"SummaryWriter.histogram({tag!r}) got NaN or infinite values; filter them "
                "out first (e.g. values[np.isfinite(values)])."
            )
        buckets = 30 if bins is None else int(bins)
        if buckets < 1:
            raise ValueError(f"SummaryWriter.histogram({tag!r}) needs bins >= 1, got {bins!r}.")
        low, high = float(arr.min()), float(arr.max())
        if low == high:  # one value: a unit-wide range around it
            low, high = low - 0.5, high + 0.5
        counts, edges = np.histogram(arr, bins=buckets, range=(low, high))
        table = np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)
        self._add_tensor(tag, table, step, "histograms")

    def text(self, tag: str, textdata: str | bytes, step: int) -> None:
        """Saves a text summary (TensorBoard renders Markdown)."""
        if not isinstance(textdata, (str, bytes)):
            raise ValueError(
                f"SummaryWriter.text needs str or bytes, got {type(textdata).__name__}; "
                "convert it with str() first."
            )
        data = textdata.encode("utf-8") if isinstance(textdata, str) else textdata
        self.write(tag, np.array(data, dtype=object), step, metadata=self._plugin("text"))

    def write(self, tag: str, tensor: Any, step: int, metadata: Any = None) -> None:
        """Saves an arbitrary tensor, for custom plugins.

        ``metadata`` is a ``SummaryMetadata`` proto (tensorboardX's or TensorFlow's) or its
        serialized bytes.
        """
        value = self._value(tag, tensor=self._tensor_proto(tensor))
        if metadata is not None:
            if not isinstance(metadata, bytes):
                serialize = getattr(metadata, "SerializeToString", None)
                if serialize is None:
                    raise TypeError(
                        "metadata must be a SummaryMetadata proto or its serialized bytes, "
                        f"got {type(metadata).__name__}."
                    )
                metadata = serialize()
            value.value[0].metadata.CopyFrom(self._pb.SummaryMetadata.FromString(metadata))
        self._add(value, step)

    def hparams(self, hparams: Mapping[str, Any]) -> None:
        """Saves hyperparameters (nested dicts are flattened to ``a.b`` names)."""
        if not isinstance(hparams, Mapping):
            raise TypeError(f"hparams must be a dict, got {type(hparams).__name__}.")
        hp = self._protos.hparams
        info = hp.SessionStartInfo(start_time_secs=time.time())
        for name, value in _flatten_hparams(hparams).items():
            if isinstance(value, bool):
                info.hparams[name].bool_value = value
            elif isinstance(value, (int, float)):
                info.hparams[name].number_value = value
            else:
                info.hparams[name].string_value = str(value)
        content = hp.HParamsPluginData(version=0, session_start_info=info).SerializeToString()
        summary = self._pb.Summary(value=[self._pb.Summary.Value(
            tag="_hparams_/session_start_info", metadata=self._plugin("hparams", content))])
        self._add(summary, 0)

    # -- helpers -------------------------------------------------------------------------------

    def _plugin(self, name: str, content: bytes = b"") -> Any:
        return self._pb.SummaryMetadata(
            plugin_data=self._pb.SummaryMetadata.PluginData(plugin_name=name, content=content)
        )

    def _add_tensor(
        self, tag: str, tensor: np.ndarray, step: int, plugin: str, content: bytes = b""
    ) -> None:
        value = self._value(tag, tensor=self._tensor_proto(tensor))
        value.value[0].metadata.CopyFrom(self._plugin(plugin, content))
        self._add(value, step)

    def _tensor_proto(self, tensor: Any) -> Any:
        arr = np.asarray(tensor)
        shape = self._shape_pb.TensorShapeProto(
            dim=[self._shape_pb.TensorShapeProto.Dim(size=d) for d in arr.shape]
        )
        if arr.dtype.kind in "OSU":
            strings = [
                x if isinstance(x, bytes) else str(x).encode("utf-8") for x in arr.reshape(-1)
            ]
            return self._tensor_pb.TensorProto(
                dtype=self._types_pb.DT_STRING, tensor_shape=shape, string_val=strings
            )
        name = _DTYPES.get(arr.dtype.name)
        if name is None:
            raise TypeError(
                f"SummaryWriter.write cannot store dtype {arr.dtype}; convert the tensor to one "
                f"of {sorted(_DTYPES)}."
            )
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return self._tensor_pb.TensorProto(
            dtype=self._types_pb.DataType.Value(name), tensor_shape=shape,
            tensor_content=np.ascontiguousarray(arr).tobytes(),
        )

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to report to
            pass


def _strings(blobs: list[bytes]) -> np.ndarray:
    out = np.empty(len(blobs), dtype=object)
    out[:] = blobs
    return out


_DTYPES = {
    "float16": "DT_HALF", "bfloat16": "DT_BFLOAT16", "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE", "int8": "DT_INT8", "int16": "DT_INT16", "int32": "DT_INT32",
    "int64": "DT_INT64", "uint8": "DT_UINT8", "uint16": "DT_UINT16", "uint32": "DT_UINT32",
    "uint64": "DT_UINT64", "bool": "DT_BOOL", "complex64": "DT_COMPLEX64",
    "complex128": "DT_COMPLEX128",
}
