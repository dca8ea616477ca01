"""flaxen.metrics.tensorboard.SummaryWriter: events written, then read back and decoded."""

import glob
import io
import os
import struct
import wave
import zlib

import numpy as np
import pytest

tbx = pytest.importorskip("tensorboardX")
from tensorboardX.proto import event_pb2, plugin_hparams_pb2, types_pb2  # noqa: E402
from tensorboardX.record_writer import masked_crc32c  # noqa: E402

from flaxen.metrics import tensorboard  # noqa: E402
from flaxen.metrics.tensorboard import SummaryWriter  # noqa: E402


def read_events(log_dir):
    """All events of the single event file in log_dir, checking the TFRecord framing CRCs."""
    (path,) = glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))
    with open(path, "rb") as f:
        data = f.read()
    events, pos = [], 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert len_crc == masked_crc32c(header)
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert body_crc == masked_crc32c(body)
        events.append(event_pb2.Event.FromString(body))
        pos += 16 + length
    return [e for e in events if e.HasField("summary")]


def values(log_dir):
    return [(e.step, v) for e in read_events(log_dir) for v in e.summary.value]


def tensor(value):
    """The numpy array of a summary value's TensorProto (numeric or string)."""
    t = value.tensor
    shape = [d.size for d in t.tensor_shape.dim]
    if t.string_val:
        return np.array(list(t.string_val), dtype=object).reshape(shape)
    dtype = {types_pb2.DT_FLOAT: "<f4", types_pb2.DT_DOUBLE: "<f8"}[t.dtype]
    return np.frombuffer(t.tensor_content, dtype).reshape(shape)


def plugin(value):
    return value.metadata.plugin_data.plugin_name


def decode_png(blob):
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(blob):
        (n,) = struct.unpack(">I", blob[pos:pos + 4])
        kind, body = blob[pos + 4:pos + 8], blob[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", blob[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + body)
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    width, height, _, color_type, *_ = header
    channels = {0: 1, 2: 3, 6: 4}[color_type]
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, width * channels + 1)
    assert (rows[:, 0] == 0).all()  # filter type "None"
    return rows[:, 1:].reshape(height, width, channels)


def test_scalar_text_histogram_roundtrip(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.scalar("loss", np.float32(0.25), step=1)
        w.scalar("loss", 0.125, step=np.int64(2))
        w.text("notes", "**hello**", step=3)
        w.histogram("weights", np.arange(100.0).reshape(10, 10), step=4, bins=5)
    got = values(tmp_path)
    # Scalars are float32 scalar tensors of the scalars plugin (what tf.summary writes).
    assert [(s, v.tag, plugin(v), tensor(v).shape, float(tensor(v))) for s, v in got[:2]] == [
        (1, "loss", "scalars", (), 0.25), (2, "loss", "scalars", (), 0.125)]
    step, text = got[2]
    assert step == 3 and text.tag == "notes" and plugin(text) == "text"
    assert list(text.tensor.string_val) == [b"**hello**"]
    step, hist = got[3]
    assert step == 4 and hist.tag == "weights" and plugin(hist) == "histograms"
    table = tensor(hist)  # one (left, right, count) row per bucket over [min, max]
    np.testing.assert_allclose(table[:, 0], [0, 19.8, 39.6, 59.4, 79.2])
    np.testing.assert_allclose(table[:, 1], [19.8, 39.6, 59.4, 79.2, 99])
    assert table[:, 2].tolist() == [20, 20, 20, 20, 20]
    with SummaryWriter(tmp_path / "one") as w:
        w.histogram("same", np.full(4, 2.0), step=0, bins=2)
    (_, same), = values(tmp_path / "one")
    assert tensor(same).tolist() == [[1.5, 2.0, 0.0], [2.0, 2.5, 4.0]]


def test_auto_flush_makes_each_call_visible(tmp_path):
    w = SummaryWriter(tmp_path)
    w.scalar("a", 1, 0)
    assert len(values(tmp_path)) == 1
    (event_file,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    size = os.path.getsize(event_file)
    w.scalar("a", 2, 1)
    assert os.path.getsize(event_file) > size and len(values(tmp_path)) == 2
    w.close()
    w.close()  # closing twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        w.scalar("a", 3, 2)
    with pytest.raises(AttributeError, match="closed"):
        w.flush()


def test_manual_flush(tmp_path):
    w = SummaryWriter(tmp_path / "logs", auto_flush=False)
    for i in range(3):
        w.scalar("x", i, i)
    (event_file,) = glob.glob(str(tmp_path / "logs" / "events.out.tfevents.*"))
    size = os.path.getsize(event_file)
    w.flush()
    assert os.path.getsize(event_file) > size  # the scalars waited in the buffer
    assert [float(tensor(v)) for _, v in values(tmp_path / "logs")] == [0, 1, 2]
    w.close()


@pytest.mark.parametrize("shape, n", [((4, 5), 1), ((4, 5, 1), 1), ((4, 5, 3), 1),
                                      ((2, 4, 5), 2), ((5, 4, 5, 3), 3)])
def test_image_shapes(tmp_path, shape, n):
    rng = np.random.RandomState(0)
    img = rng.randint(0, 256, size=shape).astype(np.uint8)
    with SummaryWriter(tmp_path) as w:
        w.image("img", img, step=7)
    (step, v), = values(tmp_path)
    # One value of the images plugin: [width, height, png_1, ..., png_n] as strings.
    assert step == 7 and v.tag == "img" and plugin(v) == "images"
    blobs = list(v.tensor.string_val)
    assert blobs[:2] == [b"5", b"4"] and len(blobs) == n + 2
    batch = img if len(shape) == 4 or (len(shape) == 3 and shape[-1] not in (1, 3)) else img[None]
    for k, blob in enumerate(blobs[2:]):
        want = batch[k]
        want = want[..., None] if want.ndim == 2 else want
        np.testing.assert_array_equal(decode_png(blob), np.broadcast_to(want, (4, 5, 3)))


def test_float_image_is_scaled_and_clipped_like_tensorflow(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.image("f", np.array([[0.0, 0.5], [0.999, 2.0]]), step=0)
    (_, v), = values(tmp_path)
    # floor(x * 255.5), saturating: TensorFlow's convert_image_dtype.
    np.testing.assert_array_equal(decode_png(v.tensor.string_val[2])[..., 0],
                                  [[0, 127], [255, 255]])


def test_audio_is_wav(tmp_path):
    clips = np.stack([np.linspace(-1, 1, 50), np.full(50, 3.0)])[..., None]
    with SummaryWriter(tmp_path) as w:
        w.audio("snd", clips, step=2, sample_rate=8000, max_outputs=1)
        w.audio("two", clips, step=3, sample_rate=8000)
    (step, v), (_, two) = values(tmp_path)
    assert step == 2 and plugin(v) == "audio" and len(v.tensor.string_val) == 1
    assert len(two.tensor.string_val) == 2
    with wave.open(io.BytesIO(v.tensor.string_val[0])) as f:
        assert (f.getnchannels(), f.getframerate(), f.getnframes()) == (1, 8000, 50)
        pcm = np.frombuffer(f.readframes(50), "<i2")
    np.testing.assert_allclose(pcm / 32767, clips[0, :, 0], atol=1e-4)
    with wave.open(io.BytesIO(two.tensor.string_val[1])) as f:
        assert (np.frombuffer(f.readframes(50), "<i2") == 32767).all()  # clipped to 1


def test_write_tensor_with_metadata(tmp_path):
    from tensorboardX.proto.summary_pb2 import SummaryMetadata

    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="custom"))
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    with SummaryWriter(tmp_path) as w:
        w.write("t", arr, step=5, metadata=meta)
        w.write("u", np.ones(2, np.float32), step=6, metadata=meta.SerializeToString())
    (s1, t), (s2, u) = values(tmp_path)
    assert (s1, s2) == (5, 6)
    assert [d.size for d in t.tensor.tensor_shape.dim] == [2, 3]
    np.testing.assert_array_equal(np.frombuffer(t.tensor.tensor_content, "<i4").reshape(2, 3), arr)
    assert t.metadata.plugin_data.plugin_name == u.metadata.plugin_data.plugin_name == "custom"
    np.testing.assert_array_equal(np.frombuffer(u.tensor.tensor_content, "<f4"), [1, 1])


def test_hparams_flattened(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.hparams({"lr": 0.1, "model": {"depth": np.int64(3), "act": "relu"},
                   "flag": True, "shape": (1, 2)})
    (_, v), = values(tmp_path)
    assert v.metadata.plugin_data.plugin_name == "hparams"
    data = plugin_hparams_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content)
    hp = data.session_start_info.hparams
    assert hp["lr"].number_value == 0.1 and hp["model.depth"].number_value == 3
    assert hp["model.act"].string_value == "relu" and hp["flag"].bool_value is True
    assert hp["shape"].string_value == "(1, 2)"


def test_bad_input_errors(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(NotADirectoryError, match="afile.*existing file"):
        SummaryWriter(afile)
    w = SummaryWriter(tmp_path / "ok")
    with pytest.raises(ValueError, match="one number"):
        w.scalar("x", np.ones(3), 0)
    with pytest.raises(TypeError, match="step must be an integer"):
        w.scalar("x", 1.0, 1.5)
    with pytest.raises(TypeError, match="tag must be a non-empty string"):
        w.scalar("", 1.0, 0)
    with pytest.raises(ValueError, match="channels"):
        w.image("i", np.zeros((2, 4, 4, 2)), 0)
    with pytest.raises(ValueError, match="shape"):
        w.image("i", np.zeros(3), 0)
    with pytest.raises(ValueError, match="str or bytes"):
        w.text("t", 3, 0)
    with pytest.raises(ValueError, match="NaN or infinite"):
        w.histogram("h", [1.0, np.nan], 0)
    with pytest.raises(TypeError, match="hparams must be a dict"):
        w.hparams([1, 2])
    w.close()


def test_missing_tensorboardx_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tbx(name, *args, **kwargs):
        if name.startswith("tensorboardX"):
            raise ImportError("No module named 'tensorboardX'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tbx)
    with pytest.raises(ImportError, match=r"pip install flaxen\[tensorboard\]"):
        tensorboard.SummaryWriter("/tmp/unused")


def test_flatten_dict_keeps_supported_scalars_and_stringifies_the_rest():
    flat = tensorboard._flatten_dict({"a": {"b": np.int64(3), "c": None}, "d": [1], "e": True})
    assert flat == {"a.b": 3, "a.c": "None", "d": "[1]", "e": True}
    assert type(flat["a.b"]) is np.int64


def test_crc32c_table_matches_the_standard_check_value():
    from flaxen.metrics import _event_file

    assert _event_file._crc32c_python(b"123456789") == 0xE3069283
