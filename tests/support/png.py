"""A PNG file that the benchmark commands drew: well formed, not blank."""

import struct


def assert_png(path):
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", path
    assert raw[12:16] == b"IHDR"
    width, height = struct.unpack(">II", raw[16:24])
    assert width >= 400 and height >= 300, (path, width, height)
    assert raw[-8:-4] == b"IEND"
    import matplotlib.image

    image = matplotlib.image.imread(str(path))  # decodes the whole image
    assert image.shape[:2] == (height, width) and image.std() > 0  # not blank
