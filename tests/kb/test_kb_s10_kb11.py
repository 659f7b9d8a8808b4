"""Issue 13, session 10 (kb11): device/runtime layers.

- normalize.info_labelled + code items: an error code that an INFO/DEBUG/TRACE/EVENT record quotes in passing (a
  timeout setting echoed with the code it avoids, a documentation link) is not the failure; a code item no longer
  hits such a line, and still hits the error record or an unprefixed line.
- PKG-022: a compiled torch extension with an undefined torch/c10/at C++ symbol (built for another torch), every
  extension and symbol; libtorch_npu.so itself stays TNPU-010, ATB symbols stay out.
- PKG-017: uv's wording of 'no file for this platform'; CANN-013: Hccl* functions torch_npu cannot find.
- CANN-018: a bare 'op type X is not found in this op store' is no longer a diagnosis of an old driver; with the
  dtype line beside it, it is.
"""

from __future__ import annotations

import pytest

from porter.kb.matcher import diagnose_text
from porter.kb.normalize import info_labelled, strip_prefix

from .conftest import entry


def _ids(kb, text):
    return [m.entry.id for m in diagnose_text(kb, text).matches]


@pytest.mark.parametrize("line, quiet", [
    ("INFO 05-01 12:00:00 [config.py:100] Setting HCCL_EXEC_TIMEOUT to avoid EI0002", True),
    ("(EngineCore pid=1) INFO 05-01 12:00:00 [a.py:1] see error code 507033", True),
    ("[INFO] HCCL(1,python):2025-01-01-10:00:00.000.000 [x.cc:1] EI0002 documented", True),
    ("2024-01-01 10:00:00 - DEBUG - EZ9999 in the table", True),
    ("[ERROR] HCCL(1,python): EI0002 INFO", False),                      # the record's level is ERROR
    ("ERROR 05-01 12:00:00 [x.py:1] INFO EZ9999", False),
    ("[2024-01-01 10:00:00] WARNING: EI0006 Getting socket times out", False),
    ("EI0002: The wait execution of the Notify register times out", False),  # no prefix at all
    ("the word INFO inside a message with EZ9999", False),                  # not a prefix
])
def test_info_labelled_reads_the_level_of_the_prefix_only(line, quiet):
    assert info_labelled(line, strip_prefix(line)) is quiet


@pytest.fixture
def code_kb(fixture_kb):
    fixture_kb.add(entry("HCCL-001", "hccl", [{"code": "EI0002", "weight": 0.7}]),
                   "EI0002: The wait execution of the Notify register times out.\n")
    return fixture_kb.compiled()


@pytest.mark.parametrize("text, fires", [
    ("EI0002: The wait execution of the Notify register times out.\n", True),
    ("[ERROR] HCCL(7,python):2025-01-01-10:00:00.000.000 [task.cc:9] EI0002 notify wait timeout\n", True),
    ("INFO 05-01 12:00:00 [config.py:100] Setting HCCL_EXEC_TIMEOUT=1800 to avoid EI0002 on slow ranks\n"
     "INFO 05-01 12:00:05 [api_server.py:901] Application startup complete.\n", False),
    ("[INFO] HCCL(7,python):2025-01-01-10:00:00.000.000 [cfg.cc:3] exec timeout set; EI0002 is reported past it\n", False),
])
def test_a_code_item_ignores_codes_quoted_by_info_records(code_kb, text, fires):
    assert (_ids(code_kb, text)[:1] == ["HCCL-001"]) is fires


@pytest.mark.parametrize("text", [
    "undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSs\n",
    "OSError: /site-packages/torchtext/lib/libtorchtext.so: undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSs\n",
    "ImportError: /site-packages/torchaudio/lib/libtorchaudio.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev\n",
    "ImportError: /tmp/ext/my_op.so: undefined symbol: _ZNK2at10TensorBase8data_ptrIfEEPT_v\n",
])
def test_pkg_022_covers_every_extension_and_torch_symbol(bundled_kb, text):
    diag = diagnose_text(bundled_kb, text)
    assert diag.top is not None and diag.top.entry.id == "PKG-022"
    assert diag.top.captures["symbol"].startswith("_ZN")


@pytest.mark.parametrize("text, not_this", [
    ("ImportError: /site-packages/torch_npu/lib/libtorch_npu.so: undefined symbol: _ZN5torch10ValueErrorC1EPKcz\n", "TNPU-010"),
    ("OSError: /site-packages/torch_npu/lib/libop_plugin_atb.so: undefined symbol: _ZN3atb15CreateOperationINS_5infer\n", None),
])
def test_pkg_022_leaves_torch_npu_and_atb_symbols_to_their_entries(bundled_kb, text, not_this):
    ids = _ids(bundled_kb, text)
    assert "PKG-022" not in ids
    if not_this:
        assert ids[:1] == [not_this]


def test_pkg_017_reads_uvs_no_wheel_for_this_platform(bundled_kb):
    text = ("error: Distribution `torchaudio==2.6.0+cpu @ registry+https://download.pytorch.org/whl/cpu` can't be installed "
            "because it doesn't have a source distribution or wheel for the current platform\n")
    diag = diagnose_text(bundled_kb, text)
    assert diag.top is not None and diag.top.entry.id == "PKG-017"
    assert diag.top.captures["package"].startswith("torchaudio==2.6.0+cpu")


@pytest.mark.parametrize("fn", ["HcclCommInitRootInfoConfig", "HcclCommSetMemoryRange", "aclmdlRICaptureBegin"])
def test_cann_013_reads_hccl_and_acl_functions_torch_npu_cannot_find(bundled_kb, fn):
    assert _ids(bundled_kb, f"RuntimeError: Failed to find function {fn}\n")[:1] == ["CANN-013"]


OP_STORE = ("EZ3002: Optype [TransData] of Ops kernel [AIcoreEngine] is unsupported. Reason: [tbe-custom]:op type "
            "TransData is not found in this op store.[Dynamic shape check]: The format and dtype is not precisely "
            "equivalent to format and dtype in op information library.\n")
DTYPE = ("[Dynamic shape check]: data type DT_BFLOAT16 of input [x] is not supported. All supported data type and "
         "format of tensor input0.x is: Data Type: {DT_FLOAT16,DT_INT8}\n")


def test_cann_018_needs_the_dtype_line_to_blame_the_driver(bundled_kb):
    assert "CANN-018" not in _ids(bundled_kb, OP_STORE)
    assert _ids(bundled_kb, OP_STORE.replace("TransData", "Conv3D") + DTYPE)[:1] == ["CANN-018"]


# -- error codes: two wrappers' spellings are read, and the DCMI rows the header defines are decoded ----------
from pathlib import Path  # noqa: E402

from porter.kb.codes import decode, load_tables  # noqa: E402
from porter.kb.extract import Extractor  # noqa: E402

_TABLES, _ = load_tables(Path(__file__).resolve().parents[2] / "knowledge" / "codes")


def _codes(text):
    ex = Extractor()
    for n, line in enumerate(text.splitlines(), 1):
        ex.feed(n, line)
    return [c for c, _, _ in ex.signals().codes]


@pytest.mark.parametrize("line, code, name", [
    ("[UCMNFSSTORE] [E] ACL ERROR: api=aclrtMallocHost, code=107002, caller=MakeBuffer,aclrt_device.cc:106.", "107002",
     "ACL_ERROR_RT_CONTEXT_NULL"),
    ("[BUG] failed to get device health:ret code: -8010,health code: 4", "-8010", "DCMI_ERR_CODE_SEND_MSG_FAIL"),
])
def test_wrapper_spellings_of_acl_and_dcmi_codes_are_decoded(line, code, name):
    assert code in _codes(line)
    assert decode(_TABLES, code).name == name


@pytest.mark.parametrize("line", [
    "HTTP request failed, code=404 Not Found",              # not six digits
    "status code: -8010 records were skipped",               # not 'ret code'
    "barcode=1234567 scanned",                               # part of a word / seven digits
])
def test_other_numbers_are_not_read_as_codes(line):
    assert not {"404", "-8010", "123456", "1234567"} & set(_codes(line))


@pytest.mark.parametrize("code, name", [("-8004", "DCMI_ERR_CODE_SECURE_FUN_FAIL"), ("-8011", "DCMI_ERR_CODE_RECV_MSG_FAIL"),
                                        ("-8014", "DCMI_ERR_CODE_FILE_OPERATE_FAIL"), ("-8022", "DCMI_ERR_CODE_PARTITION_NOT_RIGHT")])
def test_dcmi_rows_from_the_header(code, name):
    info = decode(_TABLES, code)
    assert info is not None and info.exact and info.name == name


# -- TNPU-016: the thread says it, not the 107002 line ---------------------------------------------------------
CONTEXT_EMPTY = ("RuntimeError: allocate:torch_npu/csrc/core/npu/NPUCachingAllocator.cpp:1406 NPU error, error code is 107002\n"
                 "[Error]: The context is empty.\n"
                 "EE1001: The argument is invalid.Reason: rtGetDevMsg execute failed, reason=[context pointer null]\n")


def test_tnpu_016_answers_107002_raised_in_a_thread(bundled_kb):
    text = ("Exception in thread Thread-3 (generate_stream):\nTraceback (most recent call last):\n"
            '  File "/usr/lib/python3.9/threading.py", line 950, in _bootstrap_inner\n    self.run()\n' + CONTEXT_EMPTY)
    assert _ids(bundled_kb, text)[:1] == ["TNPU-016"]


@pytest.mark.parametrize("before", [
    "",                                                                                       # no thread at all
    "ERROR 05-09 08:06:34 [engine.py:448]     torch_npu._C._npu_setDevice(device_id)\n",     # set_device itself failed
])
def test_tnpu_016_leaves_a_context_error_without_a_thread_alone(bundled_kb, before):
    text = before + CONTEXT_EMPTY + "        [Init][Version]init soc version failed, ret = 507008\n"
    assert "TNPU-016" not in _ids(bundled_kb, text)


@pytest.mark.parametrize("code, word", [("EZ1008", "tiling"), ("EZ3002", "op information library")])
def test_cann_inner_rows_for_codes_only_the_range_decoded(code, word):
    info = decode(_TABLES, code)
    assert info is not None and info.exact and word in info.meaning


# -- advice: error-ish words inside a line the program labels a warning are not the failure --------------------
TV_WARNING = ("/usr/lib/python3.10/site-packages/torchvision/io/image.py:13: UserWarning: Failed to load image Python "
              "extension: '/usr/lib/python3.10/site-packages/torchvision/image.so: undefined symbol: "
              "_ZN3c1017RegisterOperatorsD1Ev'If you don't plan on using image functionality from `torchvision.io`, you "
              "can ignore this warning.\n  warn(\n{'loss': 1.234, 'epoch': 0.1}\n{'train_runtime': 100.0, 'epoch': 1.0}\n")


def test_a_warning_with_error_words_in_a_working_run_is_advice(bundled_kb):
    diag = diagnose_text(bundled_kb, TV_WARNING)
    assert diag.status == "unknown"
    assert any(m.entry.id == "PKG-022" and m.explain.get("advice") for m in diag.near_misses)


def test_the_same_warning_in_a_failing_run_is_a_diagnosis(bundled_kb):
    failing = TV_WARNING + ("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
                            "ImportError: /site-packages/torchvision/_C.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev\n")
    assert _ids(bundled_kb, failing)[:1] == ["PKG-022"]
