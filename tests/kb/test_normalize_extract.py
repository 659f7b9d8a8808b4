"""Normaliser (bytes -> clean lines, prefixes, fuzzy form) and signal extraction."""

from __future__ import annotations

import io
import textwrap

from porter.kb.extract import Extractor, package_of
from porter.kb.normalize import clean_line, fuzzy_form, iter_lines, prepare, strip_prefix


def lines_of(data: bytes, **kw) -> list[str]:
    return list(iter_lines(io.BytesIO(data), **kw))


def test_ansi_crlf_cr_nul_and_invalid_utf8():
    data = b"\x1b[1;31mRuntimeError\x1b[0m: boom\r\n10%\r50%\r100%\nbad \xff\xfe byte\x00s\n\x1b]0;title\x07tail"
    lines = [clean_line(x) for x in lines_of(data)]
    assert lines == ["RuntimeError: boom", "10%", "50%", "100%", "bad \ufffd\ufffd bytes", "tail"]


def test_crlf_split_across_chunks_is_one_line_break(monkeypatch):
    import porter.kb.normalize as norm

    monkeypatch.setattr(norm, "CHUNK_SIZE", 4)
    assert lines_of(b"abc\r\ndef\r\n") == ["abc", "def"]
    # a multi-byte character split across chunks decodes intact
    assert lines_of("ab\u00e9\u4e2d\n".encode()) == ["ab\u00e9\u4e2d"]


def test_overlong_line_is_cut_and_the_rest_skipped():
    data = b"x" * 100_000 + b"\nnext\n"
    out = lines_of(data, max_line=1000)
    assert [len(x) for x in out] == [1000, 4]


def test_rank_and_process_prefixes_are_stripped():
    cases = {
        "(RayWorker pid=123) ValueError: x": "ValueError: x",
        "(EngineCore_DP0 pid=4567) RuntimeError: y": "RuntimeError: y",
        "(VllmWorker rank=1 pid=7) RuntimeError: z": "RuntimeError: z",  # tags with spaces (vLLM v1 workers)
        "(VllmWorker TP0 pid=7) [rank1]: OSError: w": "OSError: w",
        "(Worker_DP0_TP1_EP1 pid=5298) INFO 05-01 12:00:00 [core.py:12] hi": "hi",
        "(not a tag) pid=3": "(not a tag) pid=3",
        "(pid=5, ip=10.0.0.1) [rank3]: KeyError: 'a'": "KeyError: 'a'",
        "[rank0]: Traceback (most recent call last):": "Traceback (most recent call last):",
        "[1,0]<stderr>:ERROR: Could not find a version": "ERROR: Could not find a version",
        "2024-05-01 12:00:00,123 - ERROR - boom": "boom",
        "[2024-05-01T12:00:00.5Z] [ERROR] x": "x",
        "INFO 05-01 12:00:00 [core.py:12] hello": "hello",
        "E0501 12:00:00.123 123 file.cc:45] Check failed": "Check failed",
        "[ 1234.567890] uda_occupy_dev_by_ns: Conflict": "uda_occupy_dev_by_ns: Conflict",
        "ERROR: pip keeps its own ERROR word": "ERROR: pip keeps its own ERROR word",
    }
    for raw, want in cases.items():
        assert strip_prefix(raw) == want, raw


def test_prepare_yields_clean_and_deprefixed_forms():
    out = list(prepare(["\x1b[33m[rank1]: OSError: disk\x1b[0m"]))
    assert out == [(1, "[rank1]: OSError: disk", "OSError: disk")]


def test_fuzzy_form_replaces_variable_parts():
    form = fuzzy_form('File "/usr/lib/python3/site-packages/torch/x.py", line 12: pid=123 at 0xdeadbeef torch.Size([4, 128]) 4096 > 2048')
    assert form == 'file "<path>", line <n>: pid=<n> at <hex> <shape> <n> > <n>'


def test_package_of_frames():
    assert package_of("/usr/local/lib/python3.11/site-packages/vllm_ascend/worker/model_runner.py") == "vllm_ascend"
    assert package_of("/opt/conda/lib/python3.10/dist-packages/torch_npu/__init__.py") == "torch_npu"
    assert package_of("sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py") == "sglang"
    assert package_of("/home/user/train.py") is None


def extract(text: str):
    ex = Extractor()
    for number, _clean, deprefixed in prepare(text.splitlines()):
        ex.feed(number, deprefixed)
    return ex.signals()


def test_chained_exceptions_form_one_block_with_the_whole_chain():
    text = textwrap.dedent(
        """\
        step 1 ok
        Traceback (most recent call last):
          File "/usr/lib/python3.11/site-packages/torch_npu/npu/utils.py", line 5, in f
            raise KeyError("npu")
        KeyError: 'npu'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "/usr/lib/python3.11/site-packages/vllm_ascend/platform.py", line 9, in g
            raise RuntimeError("wrapped")
        RuntimeError: wrapped

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "/usr/lib/python3.11/site-packages/vllm_ascend/worker.py", line 1, in h
        ImportError: cannot import name 'X' from 'vllm'
        after the traceback
        """
    )
    sig = extract(text)
    assert [e.type for e in sig.exceptions] == ["KeyError", "RuntimeError", "ImportError"]
    assert sig.exceptions[2].message == "cannot import name 'X' from 'vllm'"
    tb = [b for b in sig.blocks if b.kind == "traceback"]
    assert len(tb) == 1 and tb[0].start == 2
    assert dict(sig.packages) == {"vllm_ascend": 2, "torch_npu": 1}
    assert sig.layer_hints[0] == "vllm-ascend"


def test_error_codes_are_extracted():
    text = textwrap.dedent(
        """\
        [ERROR] RUNTIME(123,python):2024-01-01 aclnnIndex failed, error code 161002
        EZ9999: Inner Error! EE1001 and EI0006 too
        The vector core execution is abnormal. retCode=0x31, [vector core exception]
        dcmi model initialized failed, because the device is used. ret is -8020
        rtGetDeviceCount:ErrCode=507899, drvRetCode=87 ERR99999
        RuntimeError: aclInit, error code is 507899
        """
    )
    codes = {c for c, _, _ in extract(text).codes}
    assert {"161002", "EZ9999", "EE1001", "EI0006", "retCode=0x31", "-8020", "507899", "drvRetCode=87", "ERR99999"} <= codes
    assert extract(text).layer_hints[0] == "cann"


def test_one_line_errors_and_dmesg_lines_become_blocks():
    sig = extract("all good\nValueError: Total available GPUs 0 is less than total desired GPUs 2\nok\n\n\n[ 12.5] uda_occupy_dev_by_ns: Conflict open udevid\n")
    kinds = [b.kind for b in sig.blocks]
    assert kinds == ["error", "dmesg"]
    assert sig.exceptions[0].type == "ValueError"
    assert "driver" in sig.layer_hints


def test_blocks_are_bounded_on_huge_inputs():
    ex = Extractor()
    for i in range(1, 20_001):
        ex.feed(i, f"RuntimeError: failure number {i}" if i % 4 == 0 else f"info line {i}")
    sig = ex.signals()
    assert len(sig.blocks) <= 32 and sig.blocks_dropped > 4000
    assert len(sig.exceptions) <= 60
    assert sig.blocks[-1].start > 19_000  # the latest errors are kept


def test_interleaved_rank_tracebacks_keep_frames_and_the_exception():
    text = textwrap.dedent(
        """\
        [rank1]: Traceback (most recent call last):
        [rank1]:   File "/x/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce
        [rank1]:     work = group.allreduce([tensor], opts)
        [rank0]: INFO step 3
        [rank1]: RuntimeError: HcclAllreduce, error code is 6
        (EngineCore_DP0 pid=7) ERROR 11-27 08:19:08 [core.py:708]   File "/y/site-packages/torch_npu/npu/__init__.py", line 247, in _lazy_init
        (EngineCore_DP0 pid=7) ERROR 11-27 08:19:08 [core.py:708]     raise RuntimeError(
        (EngineCore_DP0 pid=7) ERROR 11-27 08:19:08 [core.py:708] RuntimeError: Cannot re-initialize NPU in forked subprocess.
        """
    )
    sig = extract(text)
    assert [e.message for e in sig.exceptions] == ["HcclAllreduce, error code is 6", "Cannot re-initialize NPU in forked subprocess."]
    assert dict(sig.packages) == {"torch": 1, "torch_npu": 1}


def test_unindented_source_lines_in_pasted_tracebacks():
    text = 'File "/a/site-packages/vllm/config.py", line 1608, in __init__\nraise RuntimeError("Failed to infer device type")\nRuntimeError: Failed to infer device type\n'
    sig = extract(text)
    assert [(e.type, e.message) for e in sig.exceptions] == [("RuntimeError", "Failed to infer device type")]
