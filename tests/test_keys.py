import pytest

from zstores.errors import InvalidKeyError
from zstores.keys import (
    child_name,
    is_chunk_key_segment,
    normalize_key,
    normalize_storage_path,
    prefix_of,
    prefix_upper_bound,
)


@pytest.mark.parametrize(
    "path, expected",
    [
        (None, ""),
        ("", ""),
        ("/", ""),
        ("foo", "foo"),
        ("\\foo\\bar\\", "foo/bar"),
        ("//foo///bar//", "foo/bar"),
        (b"foo/bar", "foo/bar"),
        ("foo/.zarray", "foo/.zarray"),
        ("foo/..bar/...", "foo/..bar/..."),
        ("données", "données"),
    ],
)
def test_normalize_storage_path(path, expected):
    assert normalize_storage_path(path) == expected


@pytest.mark.parametrize("path", [".", "..", "a/.", "a/../b", "./a", "\\..\\a", "a//./b"])
def test_dot_segments_are_refused(path):
    with pytest.raises(InvalidKeyError, match=r"'\.' or '\.\.'"):
        normalize_storage_path(path)


def test_nul_is_refused():
    with pytest.raises(InvalidKeyError, match="NUL"):
        normalize_storage_path("a\x00b")


def test_non_string_path_is_a_type_error():
    with pytest.raises(TypeError, match="int"):
        normalize_storage_path(3)


def test_normalize_key_refuses_empty_and_non_str():
    assert normalize_key("/a/b/") == "a/b"
    for key in ["", "/", "///", "\\"]:
        with pytest.raises(InvalidKeyError, match="empty"):
            normalize_key(key)
    with pytest.raises(TypeError, match="bytes"):
        normalize_key(b"a")


def test_prefix_helpers():
    assert prefix_of("") == ""
    assert prefix_of("a/b") == "a/b/"
    assert prefix_upper_bound("") is None
    assert prefix_upper_bound("a/") == "a0"
    # Everything under the prefix sorts inside [prefix, bound), siblings outside.
    inside = ["a/", "a/b", "a/\uffff", "a/\U0010ffff"]
    outside = ["a", "a.b", "a-", "a0", "aa", "b"]
    for key in inside:
        assert "a/" <= key < prefix_upper_bound("a/")
        assert b"a/" <= key.encode() < prefix_upper_bound("a/").encode()
    for key in outside:
        assert not ("a/" <= key < prefix_upper_bound("a/"))
    assert child_name("a/b/c", "a/") == "b"
    assert child_name("a/b", "a/") == "b"
    assert child_name("x", "") == "x"


@pytest.mark.parametrize(
    "segment, expected",
    [("0.0", True), ("1.2.3", True), ("10.0", True), ("0", False), (".zarray", False),
     ("0.", False), (".0", False), ("a.0", False), ("0.x", False), ("١.٢", False)],
)
def test_is_chunk_key_segment(segment, expected):
    assert is_chunk_key_segment(segment) is expected
