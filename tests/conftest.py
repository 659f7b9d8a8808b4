"""Suite-wide settings: Hypothesis keeps all its files (examples, constants) outside the checkout;
the interrupt tests' children can be stopped with Ctrl-C."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir, storage_directory
from hypothesis.database import DirectoryBasedExampleDatabase

# Hypothesis defaults to ./.hypothesis, i.e. into the repository; CI and developers get one
# place outside it (HYPOTHESIS_STORAGE_DIRECTORY when set, as .ci/run does).
HYPOTHESIS_HOME = Path(os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY")
                       or Path(tempfile.gettempdir()) / "porter-hypothesis")
set_hypothesis_home_dir(HYPOTHESIS_HOME)
settings.register_profile("porter", database=DirectoryBasedExampleDatabase(str(HYPOTHESIS_HOME / "examples")))
settings.load_profile("porter")
assert storage_directory("probe", intent_to_write=False).home_directory == HYPOTHESIS_HOME

# A background job of a non-interactive shell (`bash .ci/run &`, nohup) starts with SIGINT ignored,
# and every child inherits an ignored SIGINT: the porter processes the interrupt tests stop with
# SIGINT would then never see it. A handler in this process is reset to the default in children.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
