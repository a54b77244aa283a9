"""One-line renderings of errors from deep inside a dependency."""

from __future__ import annotations

from modelbuild.errors import last_line


def test_the_last_line_skips_the_comments_tvm_prints_after_the_offending_ir():
    err = RuntimeError(
        "CodeGenVMTIR cannot emit this Relax operator directly.\nOffending call:\n"
        'R.nn.conv2d_transpose(x, w, data_layout="NHWC")\n'
        "# Metadata omitted. Use show_meta=True in script() method to show it.\n"
    )
    assert last_line(err) == 'R.nn.conv2d_transpose(x, w, data_layout="NHWC")'


def test_the_last_line_is_cut_to_the_limit_and_an_empty_message_gives_the_type():
    assert last_line(ValueError("a\n" + "x" * 900), limit=10) == "x" * 10
    assert last_line(KeyError()) == "KeyError"
