"""``benchmarks/gap_from_pixels.py``: the CNN reads a size cue it is shown (a car-like box whose width falls
with its gap) far better than a constant guess, and picks the camera asked for."""

import numpy as np

from benchmarks.gap_from_pixels import _images, train_and_read


def _scenes(n: int, seed: int) -> dict[str, np.ndarray]:
    """Two cameras of 16x32: the second shows a box 64 / gap pixels wide, the first noise alone."""
    rng = np.random.default_rng(seed)
    gap = rng.uniform(6.0, 30.0, n)
    cameras = rng.integers(0, 40, (n, 2, 1, 16, 32, 3)).astype(np.uint8)
    for i, g in enumerate(gap):
        half = int(round(32 / g))
        cameras[i, 1, 0, 6:12, 16 - half : 16 + half] = 220
    perception = np.stack([gap / 60.0, np.zeros(n)], 1).astype(np.float32)
    return {"cameras": cameras, "perception": perception}


def test_images_are_the_cameras_and_frames_channels():
    cameras = np.arange(2 * 3 * 2 * 4 * 5 * 3, dtype=np.uint8).reshape(2, 3, 2, 4, 5, 3)  # 3 cameras, 2 frames
    assert _images(cameras, "1").shape == (2, 3, 4, 5)
    np.testing.assert_allclose(_images(cameras, "1")[0, 2], cameras[0, 1, 1, :, :, 2] / 255.0, rtol=1e-6)
    both = _images(cameras, "1", "all")
    assert both.shape == (2, 6, 4, 5)
    np.testing.assert_allclose(both[1, 1], cameras[1, 1, 0, :, :, 1] / 255.0, rtol=1e-6)  # first frame, green
    np.testing.assert_allclose(both[1, 5], cameras[1, 1, 1, :, :, 2] / 255.0, rtol=1e-6)  # last frame, blue
    assert _images(cameras, "all").shape == (2, 9, 4, 5) and _images(cameras, "all", "all").shape == (2, 18, 4, 5)


def test_the_cnn_reads_the_gap_from_the_camera_that_shows_it():
    train, test = _scenes(512, 0), _scenes(128, 1)
    truth = test["perception"][:, 0] * 60.0
    errors = {}
    for camera in ("0", "1"):
        x_train, x_test = _images(train["cameras"], camera), _images(test["cameras"], camera)
        read, _ = train_and_read(x_train, train["perception"], x_test, epochs=6, seed=0)
        errors[camera] = np.abs(read[:, 0] * 60.0 - truth).mean()
    assert errors["1"] < 0.5 * errors["0"]
    assert errors["1"] < 3.0  # a constant guess is 6 m off on average
